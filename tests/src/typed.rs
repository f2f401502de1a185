//! Values of the ecosystem's types (the consumer's `with-…` features) as PostgreSQL prints
//! them and as they read: one set, for the test server's check and the live one.

use std::str::FromStr;

use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Utc};
use pgoutput_client::Row;
use rust_decimal::Decimal;

/// `typed`'s columns: name, type OID and SQL type.
pub const COLUMNS: [(&str, u32, &str); 8] = [
    ("n", 1700, "numeric"),
    ("u", 2950, "uuid"),
    ("d", 1082, "date"),
    ("t", 1083, "time"),
    ("ts", 1114, "timestamp"),
    ("tz", 1184, "timestamptz"),
    ("j", 3802, "jsonb"),
    ("js", 114, "json"),
];

/// Rows as PostgreSQL prints them (DateStyle ISO, TimeZone UTC).
pub const ROWS: [[&str; 8]; 2] = [
    [
        "-12345678901234567890.1234500",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "2024-02-29",
        "13:14:15.123456",
        "2024-02-29 13:14:15.123456",
        "2024-02-29 13:14:15.123456+00",
        r#"{"a": [1, 2.5, null], "b": "x"}"#,
        r#"{"b":"x", "a":[1,2.5,null]}"#,
    ],
    [
        "0.000001",
        "00000000-0000-0000-0000-000000000000",
        "0044-03-15 BC",
        "00:00:00",
        "1999-12-31 23:59:59.999999",
        "1970-01-01 00:00:00+00",
        "[]",
        "null",
    ],
];

/// What each row reads as.
#[derive(Debug, PartialEq)]
pub struct Typed {
    pub n: Decimal,
    pub u: uuid::Uuid,
    pub d: NaiveDate,
    pub t: NaiveTime,
    pub ts: NaiveDateTime,
    pub tz: DateTime<Utc>,
    pub j: serde_json::Value,
    pub js: serde_json::Value,
}

pub fn typed(row: &Row<'_>) -> Typed {
    Typed {
        n: row.value("n").unwrap(),
        u: row.value("u").unwrap(),
        d: row.value("d").unwrap(),
        t: row.value("t").unwrap(),
        ts: row.value("ts").unwrap(),
        tz: row.value("tz").unwrap(),
        j: row.value("j").unwrap(),
        js: row.value("js").unwrap(),
    }
}

pub fn expected() -> Vec<Typed> {
    let at = |date: &str, time: &str| {
        NaiveDateTime::new(
            NaiveDate::from_str(date).unwrap(),
            NaiveTime::from_str(time).unwrap(),
        )
    };
    vec![
        Typed {
            n: Decimal::from_str_exact("-12345678901234567890.1234500").unwrap(),
            u: uuid::Uuid::parse_str("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11").unwrap(),
            d: NaiveDate::from_ymd_opt(2024, 2, 29).unwrap(),
            t: NaiveTime::from_hms_micro_opt(13, 14, 15, 123_456).unwrap(),
            ts: at("2024-02-29", "13:14:15.123456"),
            tz: at("2024-02-29", "13:14:15.123456").and_utc(),
            j: serde_json::json!({"a": [1, 2.5, null], "b": "x"}),
            js: serde_json::json!({"b": "x", "a": [1, 2.5, null]}),
        },
        Typed {
            n: Decimal::from_str_exact("0.000001").unwrap(),
            u: uuid::Uuid::nil(),
            d: NaiveDate::from_ymd_opt(-43, 3, 15).unwrap(),
            t: NaiveTime::MIN,
            ts: at("1999-12-31", "23:59:59.999999"),
            tz: DateTime::UNIX_EPOCH,
            j: serde_json::json!([]),
            js: serde_json::Value::Null,
        },
    ]
}
