//! Column values between PostgreSQL's text and binary forms, for the built-in types whose
//! forms are simple and fixed: the test server sends each client the form it asked for
//! (`binary 'true'` or not), as PostgreSQL's output and send functions would write it, and
//! the client reads either form into Rust values.

use crate::Oid;

const BOOL: u32 = 16;
const BYTEA: u32 = 17;
const CHAR: u32 = 18;
const NAME: u32 = 19;
const INT8: u32 = 20;
const INT2: u32 = 21;
const INT4: u32 = 23;
const TEXT: u32 = 25;
const OID: u32 = 26;
const JSON: u32 = 114;
const FLOAT4: u32 = 700;
const FLOAT8: u32 = 701;
const BPCHAR: u32 = 1042;
const VARCHAR: u32 = 1043;

/// The binary (send) form of a value given in text form, if this type's is known here.
// The client reads values; only the test server writes them.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) fn text_to_binary(type_oid: Oid, text: &[u8]) -> Option<Vec<u8>> {
    let parse = || std::str::from_utf8(text).ok().map(str::trim);
    Some(match type_oid.0 {
        TEXT | VARCHAR | BPCHAR | NAME | JSON | CHAR => text.to_vec(),
        BOOL => match parse()? {
            "t" | "true" | "on" | "yes" | "1" => vec![1],
            "f" | "false" | "off" | "no" | "0" => vec![0],
            _ => return None,
        },
        INT2 => parse()?.parse::<i16>().ok()?.to_be_bytes().to_vec(),
        INT4 => parse()?.parse::<i32>().ok()?.to_be_bytes().to_vec(),
        INT8 => parse()?.parse::<i64>().ok()?.to_be_bytes().to_vec(),
        OID => parse()?.parse::<u32>().ok()?.to_be_bytes().to_vec(),
        FLOAT4 => parse()?.parse::<f32>().ok()?.to_be_bytes().to_vec(),
        FLOAT8 => parse()?.parse::<f64>().ok()?.to_be_bytes().to_vec(),
        BYTEA => hex::decode(parse()?.strip_prefix("\\x")?).ok()?,
        _ => return None,
    })
}

/// The text (output) form of a value given in binary form, if this type's is known here.
pub(crate) fn binary_to_text(type_oid: Oid, bytes: &[u8]) -> Option<Vec<u8>> {
    let text = match type_oid.0 {
        TEXT | VARCHAR | BPCHAR | NAME | JSON | CHAR => return Some(bytes.to_vec()),
        BOOL => match bytes {
            [0] => "f".to_owned(),
            [_] => "t".to_owned(),
            _ => return None,
        },
        INT2 => i16::from_be_bytes(bytes.try_into().ok()?).to_string(),
        INT4 => i32::from_be_bytes(bytes.try_into().ok()?).to_string(),
        INT8 => i64::from_be_bytes(bytes.try_into().ok()?).to_string(),
        OID => u32::from_be_bytes(bytes.try_into().ok()?).to_string(),
        FLOAT4 => float_text(f64::from(f32::from_be_bytes(bytes.try_into().ok()?))),
        FLOAT8 => float_text(f64::from_be_bytes(bytes.try_into().ok()?)),
        BYTEA => format!("\\x{}", hex::encode(bytes)),
        _ => return None,
    };
    Some(text.into_bytes())
}

/// PostgreSQL's spelling of special float values; finite ones in Rust's shortest form,
/// which reads back to the same value as PostgreSQL's (`extra_float_digits = 1`).
fn float_text(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        value.to_string()
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
        assert!(text_to_binary(Oid(1700), b"1.5").is_none());
        assert!(text_to_binary(Oid(INT4), b"x").is_none());
        assert!(binary_to_text(Oid(INT4), &[1]).is_none());
    }
}
