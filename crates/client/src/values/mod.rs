//! Column values between PostgreSQL's text and binary forms, for the built-in types and
//! their arrays: the test server sends each client the form it asked for (`binary 'true'`
//! or not), as PostgreSQL's output and send functions would write it, and the client reads
//! either form into Rust values. Each conversion accepts what the type's input or receive
//! function accepts for ordinary values and writes byte for byte what its output or send
//! function writes (with `DateStyle = ISO`, `IntervalStyle = postgres`, `TimeZone = UTC`,
//! `extra_float_digits` above 0); `None` means the value cannot be converted here.

mod array;
mod datetime;
mod fields;
mod float;
mod interval;
mod numeric;
mod uuid;

use pgoutput_codec::Oid;

/// The built-in types' OIDs (`pg_type.dat`): the one list the conversions and the
/// consumer's typed reads share.
pub const BOOL: u32 = 16;
pub const BYTEA: u32 = 17;
pub const CHAR: u32 = 18;
pub const NAME: u32 = 19;
pub const INT8: u32 = 20;
pub const INT2: u32 = 21;
pub const INT4: u32 = 23;
pub const TEXT: u32 = 25;
pub const OID: u32 = 26;
pub const JSON: u32 = 114;
pub const FLOAT4: u32 = 700;
pub const FLOAT8: u32 = 701;
pub const BPCHAR: u32 = 1042;
pub const VARCHAR: u32 = 1043;
pub const DATE: u32 = 1082;
pub const TIME: u32 = 1083;
pub const TIMESTAMP: u32 = 1114;
pub const TIMESTAMPTZ: u32 = 1184;
pub const INTERVAL: u32 = 1186;
pub const TIMETZ: u32 = 1266;
pub const NUMERIC: u32 = 1700;
pub const UUID: u32 = 2950;
pub const JSONB: u32 = 3802;

/// The version byte that starts jsonb's binary form; `jsonb_recv` knows no other.
const JSONB_VERSION: u8 = 1;

/// The OID of a built-in scalar type whose values convert here, by its `pg_catalog` name
/// (what a Type message names as a domain's base type).
pub fn builtin_type(name: &str) -> Option<Oid> {
    let oid = match name {
        "bool" => BOOL,
        "bytea" => BYTEA,
        "char" => CHAR,
        "name" => NAME,
        "int8" => INT8,
        "int2" => INT2,
        "int4" => INT4,
        "text" => TEXT,
        "oid" => OID,
        "json" => JSON,
        "float4" => FLOAT4,
        "float8" => FLOAT8,
        "bpchar" => BPCHAR,
        "varchar" => VARCHAR,
        "date" => DATE,
        "time" => TIME,
        "timestamp" => TIMESTAMP,
        "timestamptz" => TIMESTAMPTZ,
        "interval" => INTERVAL,
        "timetz" => TIMETZ,
        "numeric" => NUMERIC,
        "uuid" => UUID,
        "jsonb" => JSONB,
        _ => return None,
    };
    Some(Oid(oid))
}

/// The binary (send) form of a value given in text form, if this type's is known here.
// The client reads values; only the test server writes them.
pub fn text_to_binary(type_oid: Oid, text: &[u8]) -> Option<Vec<u8>> {
    match array::element_of(type_oid.0) {
        Some(element) => array::text_to_binary(element, text),
        None => scalar_text_to_binary(type_oid.0, text),
    }
}

/// The text (output) form of a value given in binary form, if this type's is known here.
pub fn binary_to_text(type_oid: Oid, bytes: &[u8]) -> Option<Vec<u8>> {
    match array::element_of(type_oid.0) {
        Some(element) => array::binary_to_text(element, bytes),
        None => scalar_binary_to_text(type_oid.0, bytes),
    }
}

/// [`text_to_binary`] for a type that is not an array (an array's element).
fn scalar_text_to_binary(type_oid: u32, text: &[u8]) -> Option<Vec<u8>> {
    // The typed input functions read UTF-8 text (the server encoding); the string types
    // take their bytes as they are.
    let utf8 = || std::str::from_utf8(text).ok();
    let parse = || utf8().map(str::trim);
    Some(match type_oid {
        TEXT | VARCHAR | BPCHAR | NAME | JSON => text.to_vec(),
        CHAR => vec![char_in(text)],
        BOOL => vec![u8::from(bool_in(parse()?)?)],
        INT2 => parse()?.parse::<i16>().ok()?.to_be_bytes().to_vec(),
        INT4 => parse()?.parse::<i32>().ok()?.to_be_bytes().to_vec(),
        INT8 => parse()?.parse::<i64>().ok()?.to_be_bytes().to_vec(),
        OID => parse()?.parse::<u32>().ok()?.to_be_bytes().to_vec(),
        FLOAT4 => float::parse_f32(utf8()?)?.to_be_bytes().to_vec(),
        FLOAT8 => float::parse_f64(utf8()?)?.to_be_bytes().to_vec(),
        BYTEA => hex::decode(parse()?.strip_prefix("\\x")?).ok()?,
        NUMERIC => numeric::text_to_binary(utf8()?)?,
        DATE => datetime::date_to_binary(utf8()?)?,
        TIME => datetime::time_to_binary(utf8()?)?,
        TIMETZ => datetime::timetz_to_binary(utf8()?)?,
        TIMESTAMP => datetime::timestamp_to_binary(utf8()?)?,
        TIMESTAMPTZ => datetime::timestamptz_to_binary(utf8()?)?,
        INTERVAL => interval::text_to_binary(utf8()?)?,
        UUID => uuid::text_to_binary(text)?.to_vec(),
        // The text is jsonb's output form already (captures hold what PostgreSQL wrote),
        // which is what the binary form carries after its version byte.
        JSONB => [&[JSONB_VERSION], text].concat(),
        _ => return None,
    })
}

/// [`binary_to_text`] for a type that is not an array (an array's element).
fn scalar_binary_to_text(type_oid: u32, bytes: &[u8]) -> Option<Vec<u8>> {
    let text = match type_oid {
        TEXT | VARCHAR | BPCHAR | NAME | JSON => return Some(bytes.to_vec()),
        CHAR => match bytes {
            [byte] => return Some(char_out(*byte)),
            _ => return None,
        },
        BOOL => match bytes {
            [0] => "f".to_owned(),
            [_] => "t".to_owned(),
            _ => return None,
        },
        INT2 => i16::from_be_bytes(bytes.try_into().ok()?).to_string(),
        INT4 => i32::from_be_bytes(bytes.try_into().ok()?).to_string(),
        INT8 => i64::from_be_bytes(bytes.try_into().ok()?).to_string(),
        OID => u32::from_be_bytes(bytes.try_into().ok()?).to_string(),
        FLOAT4 => float::format_f32(f32::from_be_bytes(bytes.try_into().ok()?)),
        FLOAT8 => float::format_f64(f64::from_be_bytes(bytes.try_into().ok()?)),
        BYTEA => format!("\\x{}", hex::encode(bytes)),
        NUMERIC => numeric::binary_to_text(bytes)?,
        DATE => datetime::date_to_text(bytes)?,
        TIME => datetime::time_to_text(bytes)?,
        TIMETZ => datetime::timetz_to_text(bytes)?,
        TIMESTAMP => datetime::timestamp_to_text(bytes)?,
        TIMESTAMPTZ => datetime::timestamptz_to_text(bytes)?,
        INTERVAL => interval::binary_to_text(bytes)?,
        UUID => uuid::binary_to_text(bytes)?,
        JSONB => match bytes.split_first() {
            Some((&JSONB_VERSION, json)) => return Some(json.to_vec()),
            _ => return None,
        },
        _ => return None,
    };
    Some(text.into_bytes())
}

/// `boolin`: any prefix of true, false, yes or no, `on`, `of`/`off`, `1` or `0`, in any
/// case (surrounding whitespace is already trimmed).
fn bool_in(text: &str) -> Option<bool> {
    let lower = text.to_ascii_lowercase();
    let prefix_of = |word: &str, min: usize| lower.len() >= min && word.starts_with(&*lower);
    if prefix_of("true", 1) || prefix_of("yes", 1) || lower == "on" || lower == "1" {
        Some(true)
    } else if prefix_of("false", 1) || prefix_of("no", 1) || prefix_of("off", 2) || lower == "0" {
        Some(false)
    } else {
        None
    }
}

/// `charin`: `\ooo` (three octal digits) for a byte with the high bit set, otherwise the
/// first byte (0 for empty text), as PostgreSQL 15 and later read `"char"`.
fn char_in(text: &[u8]) -> u8 {
    match text {
        [b'\\', a @ b'0'..=b'7', b @ b'0'..=b'7', c @ b'0'..=b'7'] => {
            // PostgreSQL keeps the low eight bits of `\4xx` to `\7xx`.
            let value =
                (u32::from(a - b'0') << 6) | (u32::from(b - b'0') << 3) | u32::from(c - b'0');
            value.to_le_bytes()[0]
        }
        [first, ..] => *first,
        [] => 0,
    }
}

/// `charout`: `\ooo` for a byte with the high bit set (it is not text on its own), nothing
/// for 0, the byte itself otherwise.
fn char_out(byte: u8) -> Vec<u8> {
    match byte {
        0 => Vec::new(),
        0x80.. => format!("\\{:03o}", byte).into_bytes(),
        _ => vec![byte],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for (oid, text) in [
            (INT4, "-42"),
            (INT8, "9000000000"),
            (INT2, "7"),
            (BOOL, "t"),
            (BYTEA, "\\x0a0b"),
            (TEXT, "café"),
            (FLOAT8, "1.5"),
            (OID, "16385"),
        ] {
            let binary = text_to_binary(Oid(oid), text.as_bytes()).unwrap();
            assert_eq!(binary_to_text(Oid(oid), &binary).unwrap(), text.as_bytes());
        }
        assert_eq!(text_to_binary(Oid(INT4), b"42").unwrap(), [0, 0, 0, 42]);
        assert!(text_to_binary(Oid(INT4), b"x").is_none());
        assert!(binary_to_text(Oid(INT4), &[1]).is_none());
        assert!(text_to_binary(Oid(600), b"(1,2)").is_none());
    }

    /// Malformed input of every type gives `None` or a value, never a panic: random bytes,
    /// and random text from the characters the parsers look at.
    #[test]
    fn never_panics() {
        let oids = [
            BOOL,
            BYTEA,
            CHAR,
            NAME,
            INT8,
            INT2,
            INT4,
            TEXT,
            OID,
            JSON,
            FLOAT4,
            FLOAT8,
            BPCHAR,
            VARCHAR,
            DATE,
            TIME,
            TIMESTAMP,
            TIMESTAMPTZ,
            INTERVAL,
            TIMETZ,
            NUMERIC,
            UUID,
            JSONB,
            1000,
            1007,
            1009,
            1022,
            1182,
            1185,
            1187,
            1231,
            2951,
            3807,
        ];
        let alphabet = b"0123456789 +-.:eE{}[]=,\\\"NULabdhmsyTZ\t";
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let oid = oids[next() as usize % oids.len()];
            let len = next() as usize % 40;
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let _ = binary_to_text(Oid(oid), &bytes);
            // Headers that look like arrays of the type, with random dimensions after.
            let mut array = vec![0, 0, 0, (next() % 4) as u8, 0, 0, 0, (next() % 2) as u8];
            array.extend_from_slice(&bytes);
            let _ = binary_to_text(Oid(oid), &array);
            let text: Vec<u8> = (0..len)
                .map(|_| alphabet[next() as usize % alphabet.len()])
                .collect();
            let _ = text_to_binary(Oid(oid), &text);
        }
    }

    /// `SELECT x::text, encode(charsend(x), 'hex') FROM (SELECT $1::"char" AS x) v` on
    /// PostgreSQL 15.18: (input, text, hex).
    #[test]
    fn char_matches_the_server() {
        for (input, text, hex) in [
            ("a", "a", "61"),
            ("ab", "a", "61"),
            ("", "", "00"),
            ("\\351", "\\351", "e9"),
            ("\\", "\\", "5c"),
        ] {
            let binary = text_to_binary(Oid(CHAR), input.as_bytes()).unwrap();
            assert_eq!(hex::encode(&binary), hex, "{input:?}");
            assert_eq!(binary_to_text(Oid(CHAR), &binary).unwrap(), text.as_bytes());
        }
        assert!(binary_to_text(Oid(CHAR), b"ab").is_none());
    }

    /// `SELECT $1::bool::text` on PostgreSQL 15.18; `None` where it refused the input.
    #[test]
    fn bool_input_matches_the_server() {
        for (input, value) in [
            ("t", Some(true)),
            ("TRUE", Some(true)),
            (" yes ", Some(true)),
            ("y", Some(true)),
            ("ye", Some(true)),
            ("o", None),
            ("on", Some(true)),
            ("of", Some(false)),
            ("off", Some(false)),
            ("offf", None),
            ("1", Some(true)),
            ("0", Some(false)),
            ("01", None),
            ("tr", Some(true)),
            ("fa", Some(false)),
            ("n", Some(false)),
            ("no", Some(false)),
            ("nope", None),
        ] {
            let binary = text_to_binary(Oid(BOOL), input.as_bytes());
            assert_eq!(binary, value.map(|v| vec![u8::from(v)]), "{input:?}");
        }
    }

    /// `SELECT encode(jsonb_send(x), 'hex'), x::text FROM (SELECT '{"b":[1,2],"a":1}'::jsonb
    /// AS x) v` on PostgreSQL 15.18.
    #[test]
    fn jsonb_carries_its_output_form() {
        let text = br#"{"a": 1, "b": [1, 2]}"#;
        let binary = text_to_binary(Oid(JSONB), text).unwrap();
        assert_eq!(
            hex::encode(&binary),
            "017b2261223a20312c202262223a205b312c20325d7d"
        );
        assert_eq!(binary_to_text(Oid(JSONB), &binary).unwrap(), text);
        assert!(binary_to_text(Oid(JSONB), b"\x02{}").is_none());
        assert!(binary_to_text(Oid(JSONB), b"").is_none());
        assert_eq!(
            text_to_binary(Oid(JSON), b"{\"a\":1}").unwrap(),
            b"{\"a\":1}"
        );
    }
}
