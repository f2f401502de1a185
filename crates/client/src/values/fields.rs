//! The fields PostgreSQL splits date, time and interval text into before decoding it
//! (`ParseDateTime` in datetime.c). The date/time and interval parsers read the same
//! tokens PostgreSQL's decoders read, so spellings such as `1day`, `1 day, 2 hours`,
//! `03:04:05Z` or `2024-01-02T03:04:05` split the way they do there.

/// What a field looks like, as `ParseDateTime` classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Digits, possibly with one `.` (`12`, `1.5`, `.5`).
    Number,
    /// Digits with `-`, `/` or `.` delimiters (`2024-01-02`, `1-2`), or text that runs into
    /// digits or punctuation (a zone name).
    Date,
    /// Digits with `:` (`03:04:05.5`).
    Time,
    /// Letters only, lowercased (`day`, `bc`, `utc`).
    Word,
    /// A sign and letters (`-infinity`).
    SignedWord,
    /// A sign and digits, possibly with `:`, `.` and `-` (`+05:30`, `-1.5`, `-01:02:03`).
    Signed,
}

/// One field: its kind and its text (letters lowercased, as PostgreSQL stores them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Field {
    pub(super) kind: Kind,
    pub(super) text: String,
}

/// Keywords of PostgreSQL's date/time table that stay words when digits follow them
/// (`1d2h`, `2024-01-02t03:04:05`); any other letters followed by digits form a zone name.
const KEYWORDS: &[&str] = &[
    "ad", "allballs", "am", "at", "bc", "d", "epoch", "h", "infinity", "j", "m", "mm", "pm", "s",
    "t", "y",
];

/// C's `isspace` in the C locale.
pub(super) fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// The fields of `text`, or `None` where `ParseDateTime` reports bad format.
pub(super) fn split(text: &str) -> Option<Vec<Field>> {
    let bytes = text.as_bytes();
    let mut fields = Vec::new();
    let mut i = 0;
    let take_while = |i: &mut usize, out: &mut String, keep: &dyn Fn(u8) -> bool| {
        while let Some(&b) = bytes.get(*i) {
            if !keep(b) {
                break;
            }
            out.push(char::from(b.to_ascii_lowercase()));
            *i += 1;
        }
    };
    while let Some(&b) = bytes.get(i) {
        if is_space(b) {
            i += 1;
            continue;
        }
        let mut field = String::new();
        let kind = if b.is_ascii_digit() {
            take_while(&mut i, &mut field, &|b| b.is_ascii_digit());
            match bytes.get(i) {
                Some(b':') => {
                    take_while(&mut i, &mut field, &|b| {
                        b.is_ascii_digit() || b == b':' || b == b'.'
                    });
                    Kind::Time
                }
                Some(&delim @ (b'-' | b'/' | b'.')) => {
                    field.push(char::from(delim));
                    i += 1;
                    if bytes.get(i).is_some_and(u8::is_ascii_digit) {
                        take_while(&mut i, &mut field, &|b| b.is_ascii_digit());
                        if bytes.get(i) == Some(&delim) {
                            take_while(&mut i, &mut field, &|b| b.is_ascii_digit() || b == delim);
                            Kind::Date
                        } else if delim == b'.' {
                            Kind::Number
                        } else {
                            Kind::Date
                        }
                    } else {
                        take_while(&mut i, &mut field, &|b| {
                            b.is_ascii_alphanumeric() || b == delim
                        });
                        Kind::Date
                    }
                }
                _ => Kind::Number,
            }
        } else if b == b'.' {
            field.push('.');
            i += 1;
            take_while(&mut i, &mut field, &|b| b.is_ascii_digit());
            Kind::Number
        } else if b.is_ascii_alphabetic() {
            take_while(&mut i, &mut field, &|b| b.is_ascii_alphabetic());
            let zone_name = match bytes.get(i) {
                Some(b'-' | b'/' | b'.') => true,
                Some(&b) if b == b'+' || b.is_ascii_digit() => !KEYWORDS.contains(&field.as_str()),
                _ => false,
            };
            if zone_name {
                take_while(&mut i, &mut field, &|b| {
                    b.is_ascii_alphanumeric() || b"+-/_.:".contains(&b)
                });
                Kind::Date
            } else {
                Kind::Word
            }
        } else if b == b'+' || b == b'-' {
            field.push(char::from(b));
            i += 1;
            while bytes.get(i).copied().is_some_and(is_space) {
                i += 1;
            }
            match bytes.get(i) {
                Some(b) if b.is_ascii_digit() => {
                    take_while(&mut i, &mut field, &|b| {
                        b.is_ascii_digit() || b == b':' || b == b'.' || b == b'-'
                    });
                    Kind::Signed
                }
                Some(b) if b.is_ascii_alphabetic() => {
                    take_while(&mut i, &mut field, &|b| b.is_ascii_alphabetic());
                    Kind::SignedWord
                }
                _ => return None,
            }
        } else if b.is_ascii_punctuation() {
            // Other punctuation only delimits fields.
            i += 1;
            continue;
        } else {
            return None;
        };
        fields.push(Field { kind, text: field });
    }
    Some(fields)
}

/// C's `strtol` on a field's digits: an optional run of ASCII digits (none reads as 0, as
/// `strtol` reads it) and the rest; `None` when the value overflows `i64`.
pub(super) fn leading_int(text: &str) -> Option<(i64, &str)> {
    let end = text
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, rest) = text.split_at(end);
    let value = digits.bytes().try_fold(0i64, |value, digit| {
        value.checked_mul(10)?.checked_add(i64::from(digit - b'0'))
    })?;
    Some((value, rest))
}

/// PostgreSQL's `ParseFraction`: `.` and optional digits, read as a double (`strtod`,
/// which Rust's parser matches: both round correctly).
pub(super) fn fraction(text: &str) -> Option<f64> {
    let digits = text.strip_prefix('.')?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if digits.is_empty() {
        return Some(0.0);
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<(Kind, String)> {
        split(text)
            .unwrap()
            .into_iter()
            .map(|f| (f.kind, f.text))
            .collect()
    }

    #[test]
    fn splits_like_parse_date_time() {
        use Kind::*;
        assert_eq!(
            kinds("1 year 2 Mons -3 days +04:05:06.5"),
            [
                (Number, "1".into()),
                (Word, "year".into()),
                (Number, "2".into()),
                (Word, "mons".into()),
                (Signed, "-3".into()),
                (Word, "days".into()),
                (Signed, "+04:05:06.5".into()),
            ]
        );
        assert_eq!(
            kinds("2024-01-02T03:04:05.5Z"),
            [
                (Date, "2024-01-02".into()),
                (Word, "t".into()),
                (Time, "03:04:05.5".into()),
                (Word, "z".into()),
            ]
        );
        assert_eq!(
            kinds("1day, 1.5"),
            [
                (Number, "1".into()),
                (Word, "day".into()),
                (Number, "1.5".into())
            ]
        );
        assert_eq!(kinds("- infinity"), [(SignedWord, "-infinity".into())]);
        assert_eq!(kinds("utc+5"), [(Date, "utc+5".into())]);
        assert!(split("1 é").is_none());
        assert!(split("1 - ").is_none());
    }
}
