//! float4 and float8 text. With `extra_float_digits` above 0 (the default since PostgreSQL
//! 12) `float8out` and `float4out` write the shortest digits that read back to the same
//! value (Ryu), in `%g`'s layout: an exponent (`1e+20`, `1.5e-05`) unless the decimal
//! exponent is in -4..15 (float8) or -4..6 (float4).
//!
//! PostgreSQL builds Ryu without `STRICTLY_SHORTEST`: a decimal exactly halfway to the
//! neighbouring float does not count as reading back, though it does (ties to even), so
//! its digits are sometimes one longer than Rust's shortest (`5.9118157e+08` for the float4
//! Rust writes `5.911816e8`), and among the shortest it takes the nearest, ties to even
//! (`-1.5838816263448162e+15`, not Rust's `...163e+15`). The digits are found here by the
//! exact free-format method of Steele & White with those rules.

use std::cmp::Ordering;

/// `float8out`.
pub(super) fn format_f64(value: f64) -> String {
    let bits = value.to_bits();
    let exponent = u32::try_from((bits >> 52) & 0x7ff).unwrap_or(0);
    let mantissa = bits & ((1 << 52) - 1);
    format_float(
        value.is_nan(),
        value.is_infinite(),
        value.is_sign_negative(),
        Binary {
            mantissa,
            exponent,
            mantissa_bits: 52,
            bias: 1075,
        },
        15,
    )
}

/// `float4out`: the shortest digits of the float4 itself, not of its float8 widening.
pub(super) fn format_f32(value: f32) -> String {
    let bits = value.to_bits();
    format_float(
        value.is_nan(),
        value.is_infinite(),
        value.is_sign_negative(),
        Binary {
            mantissa: u64::from(bits & ((1 << 23) - 1)),
            exponent: (bits >> 23) & 0xff,
            mantissa_bits: 23,
            bias: 150,
        },
        6,
    )
}

/// A finite float's fields: the stored mantissa and biased exponent.
struct Binary {
    mantissa: u64,
    exponent: u32,
    mantissa_bits: u32,
    /// The exponent bias plus the mantissa bits: value = significand * 2^(exponent - bias).
    bias: i32,
}

fn format_float(
    nan: bool,
    infinite: bool,
    negative: bool,
    binary: Binary,
    fixed_below: i32,
) -> String {
    if nan {
        return "NaN".into();
    }
    if infinite {
        return if negative { "-Infinity" } else { "Infinity" }.into();
    }
    let sign = if negative { "-" } else { "" };
    if binary.mantissa == 0 && binary.exponent == 0 {
        return format!("{sign}0");
    }
    let (digits, point) = shortest_digits(&binary);
    // The decimal exponent of the first digit.
    let exponent = point - 1;
    let digits = String::from_utf8(digits).unwrap_or_default();
    if (-4..fixed_below).contains(&exponent) {
        if exponent < 0 {
            let zeros = "0".repeat(usize::try_from(-point).unwrap_or(0));
            return format!("{sign}0.{zeros}{digits}");
        }
        let whole = usize::try_from(point).unwrap_or(0);
        if digits.len() <= whole {
            return format!("{sign}{digits}{}", "0".repeat(whole - digits.len()));
        }
        let (int, fraction) = digits.split_at(whole);
        return format!("{sign}{int}.{fraction}");
    }
    let (first, rest) = digits.split_at(1);
    let point = if rest.is_empty() { "" } else { "." };
    let exponent_sign = if exponent < 0 { '-' } else { '+' };
    format!(
        "{sign}{first}{point}{rest}e{exponent_sign}{:02}",
        exponent.unsigned_abs()
    )
}

/// The shortest decimal digits strictly between the float's rounding bounds, the nearest
/// to it among those (ties to an even last digit), and the position of the decimal point:
/// the value is 0.DIGITS * 10^point.
fn shortest_digits(binary: &Binary) -> (Vec<u8>, i32) {
    let (significand, e) = if binary.exponent == 0 {
        (binary.mantissa, 1 - binary.bias)
    } else {
        (
            binary.mantissa | (1 << binary.mantissa_bits),
            i32::try_from(binary.exponent).unwrap_or(0) - binary.bias,
        )
    };
    // The gap below is half the gap above at a power of two (but the smallest normal).
    let unequal = binary.mantissa == 0 && binary.exponent > 1;
    // value = r / s, upper bound = (r + plus) / s, lower bound = (r - minus) / s.
    let (mut r, mut s, mut plus, mut minus);
    let shift = e.unsigned_abs();
    if e >= 0 {
        let gap = Big::from(1).shl(shift);
        if unequal {
            r = Big::from(significand).shl(shift + 2);
            s = Big::from(4);
            plus = gap.clone().shl(1);
        } else {
            r = Big::from(significand).shl(shift + 1);
            s = Big::from(2);
            plus = gap.clone();
        }
        minus = gap;
    } else if unequal {
        r = Big::from(significand).shl(2);
        s = Big::from(1).shl(shift + 2);
        plus = Big::from(2);
        minus = Big::from(1);
    } else {
        r = Big::from(significand).shl(1);
        s = Big::from(1).shl(shift + 1);
        plus = Big::from(1);
        minus = Big::from(1);
    }
    // Scale by 10^-point so the upper bound falls in (0.1, 1]: an estimate, then fixed.
    let magnitude = e + i32::try_from(64 - significand.leading_zeros()).unwrap_or(0);
    let mut point = (f64::from(magnitude) * std::f64::consts::LOG10_2).ceil() as i32;
    if point >= 0 {
        s = s.mul_pow10(point.unsigned_abs());
    } else {
        let scale = point.unsigned_abs();
        r = r.mul_pow10(scale);
        plus = plus.mul_pow10(scale);
        minus = minus.mul_pow10(scale);
    }
    loop {
        let high = r.add(&plus);
        if high.cmp(&s) == Ordering::Greater {
            s = s.mul_pow10(1);
            point += 1;
        } else if high.mul_pow10(1).cmp(&s) != Ordering::Greater {
            r = r.mul_pow10(1);
            plus = plus.mul_pow10(1);
            minus = minus.mul_pow10(1);
            point -= 1;
        } else {
            break;
        }
    }
    let mut digits = Vec::new();
    loop {
        r = r.mul_pow10(1);
        plus = plus.mul_pow10(1);
        minus = minus.mul_pow10(1);
        let mut digit = 0u8;
        while r.cmp(&s) != Ordering::Less {
            r = r.sub(&s);
            digit += 1;
        }
        // Whether the truncated digits, or those rounded up, are strictly within bounds.
        let low_ok = r.cmp(&minus) == Ordering::Less;
        let high_ok = r.add(&plus).cmp(&s) == Ordering::Greater;
        if !low_ok && !high_ok {
            digits.push(b'0' + digit);
            continue;
        }
        let up = match (low_ok, high_ok) {
            (true, false) => false,
            (false, true) => true,
            _ => match r.add(&r).cmp(&s) {
                Ordering::Less => false,
                Ordering::Greater => true,
                Ordering::Equal => digit % 2 == 1,
            },
        };
        digits.push(b'0' + digit + u8::from(up));
        break;
    }
    // A rounded-up 9 carries (the bounds rule it out, but stay exact if it happened).
    while let Some(pos) = digits.iter().position(|&d| d > b'9') {
        digits[pos] = b'0';
        if pos == 0 {
            digits.insert(0, b'1');
            point += 1;
        } else {
            digits[pos - 1] += 1;
        }
    }
    while digits.len() > 1 && digits.last() == Some(&b'0') {
        digits.pop();
    }
    (digits, point)
}

/// A nonnegative integer of any size, little-endian 32-bit limbs, for the exact digits.
#[derive(Debug, Clone)]
struct Big(Vec<u32>);

impl From<u64> for Big {
    fn from(value: u64) -> Big {
        let [a, b, c, d, e, f, g, h] = value.to_le_bytes();
        Big(vec![
            u32::from_le_bytes([a, b, c, d]),
            u32::from_le_bytes([e, f, g, h]),
        ])
        .trim()
    }
}

impl Big {
    fn trim(mut self) -> Big {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
        self
    }

    fn shl(self, bits: u32) -> Big {
        let words = usize::try_from(bits / 32).unwrap_or(0);
        let bits = bits % 32;
        let mut out = vec![0u32; words];
        let mut carry = 0u32;
        for &limb in &self.0 {
            if bits == 0 {
                out.push(limb);
            } else {
                out.push((limb << bits) | carry);
                carry = limb >> (32 - bits);
            }
        }
        out.push(carry);
        Big(out).trim()
    }

    fn mul_small(self, factor: u32) -> Big {
        let mut carry = 0u64;
        let mut out: Vec<u32> = self
            .0
            .iter()
            .map(|&limb| {
                let product = u64::from(limb) * u64::from(factor) + carry;
                carry = product >> 32;
                product as u32
            })
            .collect();
        out.push(carry as u32);
        Big(out).trim()
    }

    fn mul_pow10(self, power: u32) -> Big {
        (0..power).fold(self, |big, _| big.mul_small(10))
    }

    fn add(&self, other: &Big) -> Big {
        let len = self.0.len().max(other.0.len());
        let mut carry = 0u64;
        let mut out = Vec::with_capacity(len + 1);
        for i in 0..len {
            let sum = u64::from(*self.0.get(i).unwrap_or(&0))
                + u64::from(*other.0.get(i).unwrap_or(&0))
                + carry;
            out.push(sum as u32);
            carry = sum >> 32;
        }
        out.push(carry as u32);
        Big(out).trim()
    }

    /// `self - other`, for `self >= other`.
    fn sub(&self, other: &Big) -> Big {
        let mut borrow = 0i64;
        let out = self
            .0
            .iter()
            .enumerate()
            .map(|(i, &limb)| {
                let mut diff = i64::from(limb) - i64::from(*other.0.get(i).unwrap_or(&0)) - borrow;
                borrow = i64::from(diff < 0);
                if diff < 0 {
                    diff += 1 << 32;
                }
                diff as u32
            })
            .collect();
        Big(out).trim()
    }

    fn cmp(&self, other: &Big) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }
}

/// `float8in`: what `strtod` reads, surrounded by whitespace; out of range (overflow to
/// infinity, or underflow of nonzero digits to zero) is refused as PostgreSQL refuses it.
pub(super) fn parse_f64(text: &str) -> Option<f64> {
    let trimmed = trim(text)?;
    let value: f64 = trimmed.parse().ok()?;
    in_range(trimmed, value.is_infinite(), value == 0.0).then_some(value)
}

/// `float4in`, likewise for float4's range.
pub(super) fn parse_f32(text: &str) -> Option<f32> {
    let trimmed = trim(text)?;
    let value: f32 = trimmed.parse().ok()?;
    in_range(trimmed, value.is_infinite(), value == 0.0).then_some(value)
}

fn trim(text: &str) -> Option<&str> {
    let trimmed = text.trim_matches(|c: char| c.is_ascii() && super::fields::is_space(c as u8));
    (!trimmed.is_empty()).then_some(trimmed)
}

/// Whether a parsed value is what its text says rather than an overflow or underflow.
fn in_range(text: &str, infinite: bool, zero: bool) -> bool {
    let spelled_infinite = text
        .trim_start_matches(['+', '-'])
        .get(..3)
        .is_some_and(|head| head.eq_ignore_ascii_case("inf"));
    if infinite {
        return spelled_infinite;
    }
    if zero {
        // Only zero digits before the exponent, if any.
        let mantissa = text.split(['e', 'E']).next().unwrap_or("");
        return !mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SELECT x::text FROM (VALUES ($1::float8)) v(x)` on PostgreSQL 15.18 with
    /// `extra_float_digits = 1`, and `encode(float8send('NaN'), 'hex')`.
    #[test]
    fn float8_matches_the_server() {
        for (input, text) in [
            ("1e15", "1e+15"),
            ("1e14", "100000000000000"),
            ("123456789012345.6", "123456789012345.6"),
            ("1e-4", "0.0001"),
            ("1e-5", "1e-05"),
            ("1.5e-5", "1.5e-05"),
            ("0.1", "0.1"),
            ("0.3333333333333333", "0.3333333333333333"),
            ("-2.5e300", "-2.5e+300"),
            ("5e-324", "5e-324"),
            ("NaN", "NaN"),
            ("-Infinity", "-Infinity"),
            ("0", "0"),
            ("-0", "-0"),
            ("1e16", "1e+16"),
            ("123456789012345678", "1.2345678901234568e+17"),
        ] {
            let value = parse_f64(input).unwrap();
            assert_eq!(format_f64(value), text, "{input}");
            assert_eq!(parse_f64(text).unwrap().to_bits(), value.to_bits());
        }
        assert_eq!(parse_f64("NaN").unwrap().to_bits(), 0x7ff8000000000000);
        assert_eq!(parse_f64(" inf ").unwrap(), f64::INFINITY);
        for refused in ["1e400", "-1e400", "1e-400", "", " ", "1x", "1e"] {
            assert_eq!(parse_f64(refused), None, "{refused:?}");
        }
    }

    /// The same with `$1::float4`, and `encode(float4send('NaN'), 'hex')`.
    #[test]
    fn float4_matches_the_server() {
        for (input, text) in [
            ("1e6", "1e+06"),
            ("1e5", "100000"),
            ("123456", "123456"),
            ("1234567", "1.234567e+06"),
            ("12345678", "1.2345678e+07"),
            ("1e-4", "0.0001"),
            ("1e-5", "1e-05"),
            ("0.1", "0.1"),
            ("3.4e38", "3.4e+38"),
            ("1e-45", "1e-45"),
            ("-0", "-0"),
            ("1.5e7", "1.5e+07"),
            ("1e7", "1e+07"),
        ] {
            let value = parse_f32(input).unwrap();
            assert_eq!(format_f32(value), text, "{input}");
            assert_eq!(parse_f32(text).unwrap().to_bits(), value.to_bits());
        }
        assert_eq!(parse_f32("NaN").unwrap().to_bits(), 0x7fc00000);
        for refused in ["1e39", "1e-46"] {
            assert_eq!(parse_f32(refused), None, "{refused:?}");
        }
    }
}
