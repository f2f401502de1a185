//! The JSON (serde) form of the wire's value types, behind the `serde` feature.
//!
//! - `Lsn`: a string as PostgreSQL prints it, `"0/1B46000"`.
//! - `PgTimestamp`: a string a person can read, `"2023-11-14 22:13:20.123456+00"`, exact
//!   for every Int64 value (`"infinity"` and `"-infinity"` for the extremes).
//! - `PgStr`, `PgBytes`: a JSON string when the bytes are UTF-8, else `{"hex": "caf3e9"}`;
//!   both forms are accepted on input, so every byte survives a round trip.
//!
//! Messages derive the rest: one object per message with `"type"` in snake_case and its
//! fields under their Rust names.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{Lsn, PgBytes, PgStr, PgTimestamp};

/// Types whose JSON form is their text form: `Display` out, `FromStr` in.
macro_rules! serde_as_text {
    ($($ty:ty),*) => {$(
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = Cow::<str>::deserialize(d)?;
                text.parse().map_err(|e| de::Error::custom(format!("{e}: {text:?}")))
            }
        }
    )*};
}

serde_as_text!(Lsn, PgTimestamp);

/// Bytes as a string when they are UTF-8, else as `{"hex": "…"}`.
fn serialize_bytes<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    match std::str::from_utf8(bytes) {
        Ok(text) => s.serialize_str(text),
        Err(_) => {
            let mut map = s.serialize_map(Some(1))?;
            map.serialize_entry("hex", &hex::encode(bytes))?;
            map.end()
        }
    }
}

/// Accepts both forms of [`serialize_bytes`].
struct BytesVisitor;

impl<'de> Visitor<'de> for BytesVisitor {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(r#"a string, or {"hex": "…"} for bytes that are not UTF-8"#)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Vec<u8>, E> {
        Ok(text.as_bytes().to_vec())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<u8>, A::Error> {
        let key: Cow<'de, str> = map
            .next_key()?
            .ok_or_else(|| de::Error::missing_field("hex"))?;
        if key != "hex" {
            return Err(de::Error::unknown_field(&key, &["hex"]));
        }
        let hex: Cow<'de, str> = map.next_value()?;
        if map.next_key::<Cow<'de, str>>()?.is_some() {
            return Err(de::Error::custom("expected only the key \"hex\""));
        }
        hex::decode(&*hex).map_err(|e| de::Error::custom(format!("invalid hex {hex:?}: {e}")))
    }
}

impl Serialize for PgStr<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_bytes(self.as_bytes(), s)
    }
}

impl<'de> Deserialize<'de> for PgStr<'_> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(BytesVisitor).map(PgStr::from)
    }
}

impl Serialize for PgBytes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_bytes(self.as_bytes(), s)
    }
}

impl<'de> Deserialize<'de> for PgBytes<'_> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(BytesVisitor).map(PgBytes::from)
    }
}
