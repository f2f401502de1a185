//! numeric: PostgreSQL's decimal of arbitrary precision. Its binary form (`numeric_send`)
//! carries base-10000 digit groups, the weight of the first group and the display scale, so
//! the text form comes from the digits and the scale alone, as `numeric_out` writes it.

const POSITIVE: u16 = 0x0000;
const NEGATIVE: u16 = 0x4000;
const NAN: u16 = 0xC000;
const INFINITY: u16 = 0xD000;
const NEGATIVE_INFINITY: u16 = 0xF000;
/// The largest display scale a numeric can carry (`NUMERIC_DSCALE_MAX`).
const DSCALE_MAX: u16 = 0x3FFF;
/// The display scale `numeric_send` writes for ±Infinity: it reads the scale bits of the
/// special value's short header, which hold 0x20 for both infinities (and 0 for NaN).
const INFINITY_DSCALE: u16 = 0x20;
/// Decimal digits per base-10000 group.
const DEC_DIGITS: i64 = 4;

/// A numeric value as `numeric_in` and `numeric_recv` store it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Numeric {
    NaN,
    Infinity,
    NegativeInfinity,
    /// Stripped as `make_result` strips: no leading or trailing zero groups, and zero is
    /// positive with weight 0.
    Finite {
        negative: bool,
        weight: i16,
        dscale: u16,
        digits: Vec<i16>,
    },
}

/// The binary form of numeric text, as `numeric_in` reads it and `numeric_send` writes it.
pub(super) fn text_to_binary(text: &str) -> Option<Vec<u8>> {
    let (sign, dscale, weight, digits): (u16, u16, i16, &[i16]) = match &parse(text)? {
        Numeric::NaN => (NAN, 0, 0, &[]),
        Numeric::Infinity => (INFINITY, INFINITY_DSCALE, 0, &[]),
        Numeric::NegativeInfinity => (NEGATIVE_INFINITY, INFINITY_DSCALE, 0, &[]),
        Numeric::Finite {
            negative,
            weight,
            dscale,
            digits,
        } => {
            let sign = if *negative { NEGATIVE } else { POSITIVE };
            return Some(encode(sign, *weight, *dscale, digits));
        }
    };
    Some(encode(sign, weight, dscale, digits))
}

fn encode(sign: u16, weight: i16, dscale: u16, digits: &[i16]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + 2 * digits.len());
    // At most 32768 groups fit the weight's range, so the count fits its u16.
    let ndigits = u16::try_from(digits.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&ndigits.to_be_bytes());
    out.extend_from_slice(&weight.to_be_bytes());
    out.extend_from_slice(&sign.to_be_bytes());
    out.extend_from_slice(&dscale.to_be_bytes());
    for digit in digits {
        out.extend_from_slice(&digit.to_be_bytes());
    }
    out
}

/// The text form of a binary numeric, as `numeric_recv` then `numeric_out` make it.
pub(super) fn binary_to_text(bytes: &[u8]) -> Option<String> {
    let value = receive(bytes)?;
    Some(match value {
        Numeric::NaN => "NaN".into(),
        Numeric::Infinity => "Infinity".into(),
        Numeric::NegativeInfinity => "-Infinity".into(),
        Numeric::Finite {
            negative,
            weight,
            dscale,
            digits,
        } => format_finite(negative, weight, dscale, &digits),
    })
}

/// `numeric_recv`: header, digits each below 10000, a known sign, a scale that fits, and
/// nothing after; digits the scale hides are cut off (`trunc_var`), then the value is
/// stripped.
fn receive(bytes: &[u8]) -> Option<Numeric> {
    let word = |i: usize| -> Option<[u8; 2]> { bytes.get(i..i + 2)?.try_into().ok() };
    let ndigits = usize::from(u16::from_be_bytes(word(0)?));
    let weight = i16::from_be_bytes(word(2)?);
    let sign = u16::from_be_bytes(word(4)?);
    let dscale = u16::from_be_bytes(word(6)?);
    if bytes.len() != 8 + 2 * ndigits || dscale > DSCALE_MAX {
        return None;
    }
    let digits = bytes[8..]
        .chunks_exact(2)
        .map(|pair| {
            let digit = i16::from_be_bytes([pair[0], pair[1]]);
            (0..10000).contains(&digit).then_some(digit)
        })
        .collect::<Option<Vec<i16>>>()?;
    match sign {
        NAN => return Some(Numeric::NaN),
        INFINITY => return Some(Numeric::Infinity),
        NEGATIVE_INFINITY => return Some(Numeric::NegativeInfinity),
        POSITIVE | NEGATIVE => {}
        _ => return None,
    }
    // trunc_var: keep the decimal digits down to the scale's last.
    let mut digits = digits;
    let wanted = (i64::from(weight) + 1) * DEC_DIGITS + i64::from(dscale);
    if wanted <= 0 {
        digits.clear();
    } else {
        let groups = usize::try_from((wanted + DEC_DIGITS - 1) / DEC_DIGITS).ok()?;
        if groups <= digits.len() {
            digits.truncate(groups);
            let partial = wanted % DEC_DIGITS;
            if partial > 0 {
                if let Some(last) = digits.last_mut() {
                    let unit = 10i16.pow(u32::try_from(DEC_DIGITS - partial).ok()?);
                    *last -= *last % unit;
                }
            }
        }
    }
    strip(sign == NEGATIVE, i64::from(weight), dscale, digits)
}

/// `make_result`'s stripping of leading and trailing zero groups; `None` when the weight
/// left does not fit (PostgreSQL's "value overflows numeric format").
fn strip(negative: bool, mut weight: i64, dscale: u16, digits: Vec<i16>) -> Option<Numeric> {
    let leading = digits.iter().take_while(|&&d| d == 0).count();
    let trailing = digits[leading..]
        .iter()
        .rev()
        .take_while(|&&d| d == 0)
        .count();
    let kept = digits[leading..digits.len() - trailing].to_vec();
    weight -= i64::try_from(leading).ok()?;
    if kept.is_empty() {
        return Some(Numeric::Finite {
            negative: false,
            weight: 0,
            dscale,
            digits: kept,
        });
    }
    Some(Numeric::Finite {
        negative,
        weight: i16::try_from(weight).ok()?,
        dscale,
        digits: kept,
    })
}

/// `get_str_from_var`: the integer groups (at least `0`), then `dscale` digits after the
/// point, zeros where the digits end.
fn format_finite(negative: bool, weight: i16, dscale: u16, digits: &[i16]) -> String {
    let group = |index: i64| -> i16 {
        usize::try_from(index)
            .ok()
            .and_then(|i| digits.get(i).copied())
            .unwrap_or(0)
    };
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    if weight < 0 {
        out.push('0');
    } else {
        let whole: String = (0..=i64::from(weight))
            .map(|i| format!("{:04}", group(i)))
            .collect();
        let significant = whole.trim_start_matches('0');
        out.push_str(if significant.is_empty() {
            "0"
        } else {
            significant
        });
    }
    if dscale > 0 {
        out.push('.');
        let first = i64::from(weight) + 1;
        let groups = (i64::from(dscale) + DEC_DIGITS - 1) / DEC_DIGITS;
        let fraction: String = (first..first + groups)
            .map(|i| format!("{:04}", group(i)))
            .collect();
        out.push_str(&fraction[..usize::from(dscale)]);
    }
    out
}

/// `numeric_in`: surrounding whitespace, NaN and the infinities (the spellings float8in
/// takes, case-insensitive), or sign, digits with at most one point, and an exponent.
fn parse(text: &str) -> Option<Numeric> {
    let bytes = text.as_bytes();
    let start = bytes
        .iter()
        .position(|&b| !super::fields::is_space(b))
        .unwrap_or(bytes.len());
    let rest = &bytes[start..];
    let prefixed = |word: &str| {
        rest.get(..word.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(word.as_bytes()))
    };
    let special = [
        ("NaN", Numeric::NaN),
        ("Infinity", Numeric::Infinity),
        ("+Infinity", Numeric::Infinity),
        ("-Infinity", Numeric::NegativeInfinity),
        ("inf", Numeric::Infinity),
        ("+inf", Numeric::Infinity),
        ("-inf", Numeric::NegativeInfinity),
    ]
    .into_iter()
    .find(|(word, _)| prefixed(word));
    let (value, end) = match special {
        Some((word, value)) => (value, word.len()),
        None => parse_finite(rest)?,
    };
    rest[end..]
        .iter()
        .all(|&b| super::fields::is_space(b))
        .then_some(value)
}

/// An optional leading `+` or `-`: whether it is negative, and the bytes it took.
fn sign(bytes: &[u8]) -> (bool, usize) {
    match bytes.first() {
        Some(b'-') => (true, 1),
        Some(b'+') => (false, 1),
        _ => (false, 0),
    }
}

/// `set_var_from_str`: the value and how many bytes it took.
fn parse_finite(bytes: &[u8]) -> Option<(Numeric, usize)> {
    let (negative, mut i) = sign(bytes);
    let mut have_point = false;
    if bytes.get(i) == Some(&b'.') {
        have_point = true;
        i += 1;
    }
    if !bytes.get(i).is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let mut decimals: Vec<u8> = Vec::new();
    // The power of ten of the first digit, and the digits after the point.
    let mut dweight: i64 = -1;
    let mut dscale: i64 = 0;
    while let Some(&b) = bytes.get(i) {
        if b.is_ascii_digit() {
            decimals.push(b - b'0');
            if have_point {
                dscale += 1;
            } else {
                dweight += 1;
            }
        } else if b == b'.' {
            if have_point {
                return None;
            }
            have_point = true;
        } else {
            break;
        }
        i += 1;
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        let (exponent, used) = exponent(&bytes[i..])?;
        i += used;
        // PostgreSQL bounds the exponent by INT_MAX / 2 before applying it.
        const LIMIT: i64 = (i32::MAX / 2) as i64;
        if exponent >= LIMIT || exponent <= -LIMIT {
            return None;
        }
        dweight += exponent;
        dscale = (dscale - exponent).max(0);
    }
    let dscale = u16::try_from(dscale)
        .ok()
        .filter(|&scale| scale <= DSCALE_MAX)?;
    // Base-10000 groups: the digit at index k stands for 10^(dweight - k).
    let first = decimals.iter().position(|&d| d != 0);
    let last = decimals.iter().rposition(|&d| d != 0);
    let (Some(first), Some(last)) = (first, last) else {
        return Some((strip(false, 0, dscale, Vec::new())?, i));
    };
    let power = |k: usize| dweight - i64::try_from(k).unwrap_or(i64::MAX);
    let weight = power(first).div_euclid(DEC_DIGITS);
    let lowest = power(last).div_euclid(DEC_DIGITS);
    let weight16 = i16::try_from(weight).ok()?;
    let mut groups = vec![0i16; usize::try_from(weight - lowest + 1).ok()?];
    for (k, &digit) in decimals.iter().enumerate().take(last + 1).skip(first) {
        let p = power(k);
        let index = usize::try_from(weight - p.div_euclid(DEC_DIGITS)).ok()?;
        let scale = 10i16.pow(u32::try_from(p.rem_euclid(DEC_DIGITS)).ok()?);
        groups[index] += i16::from(digit) * scale;
    }
    Some((strip(negative, i64::from(weight16), dscale, groups)?, i))
}

/// The exponent as PostgreSQL 16 and later read it: an optional sign, then digits (at
/// least one); saturates on overflow. Returns the value and the bytes it took. (15 read it
/// with `strtol`, which also skipped whitespace after the `e`.)
fn exponent(bytes: &[u8]) -> Option<(i64, usize)> {
    let (negative, mut i) = sign(bytes);
    let start = i;
    let mut value: i64 = 0;
    while let Some(&b) = bytes.get(i).filter(|b| b.is_ascii_digit()) {
        value = value.saturating_mul(10).saturating_add(i64::from(b - b'0'));
        i += 1;
    }
    if i == start {
        return None;
    }
    Some((if negative { -value } else { value }, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (input, `x::text`, `encode(numeric_send(x), 'hex')`) from PostgreSQL 15.18:
    /// `SELECT x::text, encode(numeric_send(x), 'hex') FROM (SELECT $1::numeric AS x) v`
    /// for each input (the last row with `::numeric(12,2)`).
    const SERVER: &[(&str, &str, &str)] = &[
        ("10.50", "10.50", "0002000000000002000a1388"),
        ("0", "0", "0000000000000000"),
        ("0.00", "0.00", "0000000000000002"),
        ("-0.5", "-0.5", "0001ffff400000011388"),
        ("1e20", "100000000000000000000", "00010005000000000001"),
        ("12345678.9", "12345678.9", "000300010000000104d2162e2328"),
        ("0.0001", "0.0001", "0001ffff000000040001"),
        ("NaN", "NaN", "00000000c0000000"),
        ("Infinity", "Infinity", "00000000d0000020"),
        ("-Infinity", "-Infinity", "00000000f0000020"),
        ("1.5e3", "1500", "000100000000000005dc"),
        ("1.50e1", "15.0", "0001000000000001000f"),
        ("-0.0", "0.0", "0000000000000001"),
        ("+inf", "Infinity", "00000000d0000020"),
        ("nan", "NaN", "00000000c0000000"),
        (".5", "0.5", "0001ffff000000011388"),
        ("5.", "5", "00010000000000000005"),
        ("  7  ", "7", "00010000000000000007"),
        ("1e-3", "0.001", "0001ffff00000003000a"),
        ("-123.456", "-123.456", "0002000040000003007b11d0"),
        ("10000", "10000", "00010001000000000001"),
        (
            "100000000.000000010",
            "100000000.000000010",
            "000500020000000900010000000000000001",
        ),
        ("9999.9999", "9999.9999", "0002000000000004270f270f"),
        ("-1e-10", "-0.0000000001", "0001fffd4000000a0064"),
        (
            "123456789012345678901234567890.123456789",
            "123456789012345678901234567890.123456789",
            "000b000700000009000c0d801ed204d2162e23340d801ed204d2162e2328",
        ),
        ("0.000001000", "0.000001000", "0001fffe000000090064"),
        ("-00012.3400", "-12.3400", "0002000040000004000c0d48"),
        ("1E+2", "100", "00010000000000000064"),
        ("0.1e-2", "0.001", "0001ffff00000003000a"),
        (
            "1.23456789e-7",
            "0.000000123456789",
            "0003fffe0000000f000c0d801ed2",
        ),
        ("99999999", "99999999", "0002000100000000270f270f"),
        ("-inf", "-Infinity", "00000000f0000020"),
        ("1e1", "10", "0001000000000000000a"),
        ("+.5", "0.5", "0001ffff000000011388"),
        ("-.5e1", "-5", "00010000400000000005"),
        ("10.5::numeric(12,2)", "10.50", "0002000000000002000a1388"),
    ];

    /// Inputs PostgreSQL 15.18 refuses ("invalid input syntax" or "value overflows numeric
    /// format"), the same query as above. (18.6 reads `1_000` and `0x10`, integers in its
    /// new spellings, which are not read here.)
    const REFUSED: &[&str] = &[
        "1e-16384",
        "1e131072",
        "1e1073741823",
        ".",
        "-",
        "1e",
        "1e+",
        "1.2.3",
        "1 2",
        "infinity x",
        "infinit",
        "-nan",
        "1_000",
        "0x10",
        "e5",
        "",
        // PostgreSQL 18.6 refuses this too; 15.18 reads it as 100000.
        "1e 5",
    ];

    /// Binary values read back by the server (`COPY t (x numeric) FROM STDIN (FORMAT
    /// binary)`, then `SELECT x::text`): non-canonical digits, hidden digits, special
    /// values with odd scales; `None` where it refused them.
    const RECEIVED: &[(&str, Option<&str>)] = &[
        ("0002ffff000000010000 0001", Some("0.0")),
        ("0002000000000000 0000 0001", Some("0")),
        ("0001fffe00000004 000a", Some("0.0000")),
        ("0002000000000001 0001 0000", Some("1.0")),
        ("0000000040000000", Some("0")),
        ("0001ffff40000002 000a", Some("0.00")),
        ("00000000d0000000", Some("Infinity")),
        ("00000000d0000005", Some("Infinity")),
        ("00000000c0000000", Some("NaN")),
        ("00010000c0000000 0005", Some("NaN")),
        ("0001800000000000 0001", Some("0")),
        ("0002800000000000 0000 0001", Some("0")),
        ("0000000040000003", Some("0.000")),
        ("0001000300000000 0001", Some("1000000000000")),
        ("0001000000000000 ffff", None),
        ("0001000000004000 270f", None),
        ("0001000000000000 2710", None),
        ("00010000c0000000 ffff", None),
        ("0000000010000000", None),
        ("00000000e0000000", None),
        ("0001000000000000", None),
        ("0001000000000000 0001 00", None),
        ("0000", None),
    ];

    fn unhex(text: &str) -> Vec<u8> {
        hex::decode(text.replace(' ', "")).unwrap()
    }

    #[test]
    fn matches_the_server() {
        for &(input, text, hex) in SERVER {
            let bytes = unhex(hex);
            // The column's scale (a typmod) is the server's to apply, not the value's.
            if !input.ends_with("::numeric(12,2)") {
                assert_eq!(
                    text_to_binary(input),
                    Some(bytes.clone()),
                    "send of {input:?}"
                );
            }
            assert_eq!(
                binary_to_text(&bytes).as_deref(),
                Some(text),
                "output of {input:?}"
            );
            assert_eq!(text_to_binary(text), Some(bytes), "round trip of {input:?}");
        }
        for input in REFUSED {
            assert_eq!(text_to_binary(input), None, "{input:?}");
        }
        for &(hex, text) in RECEIVED {
            assert_eq!(binary_to_text(&unhex(hex)).as_deref(), text, "{hex}");
        }
    }

    /// The extremes of the range: `SELECT encode(numeric_send('1e-16383'::numeric), 'hex'),
    /// encode(numeric_send('1e131071'::numeric), 'hex')` and the lengths of their text
    /// (16385 and 131072).
    #[test]
    fn extremes() {
        let smallest = text_to_binary("1e-16383").unwrap();
        assert_eq!(hex::encode(&smallest), "0001f00000003fff000a");
        let text = binary_to_text(&smallest).unwrap();
        assert_eq!(
            (text.len(), &text[..4], &text[text.len() - 2..]),
            (16385, "0.00", "01")
        );
        let largest = text_to_binary("1e131071").unwrap();
        assert_eq!(hex::encode(&largest), "00017fff0000000003e8");
        let text = binary_to_text(&largest).unwrap();
        assert_eq!((text.len(), &text[..3]), (131072, "100"));
        assert_eq!(text_to_binary(&text), Some(largest));
    }
}
