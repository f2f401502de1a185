//! Arrays of the built-in types here. The binary form (`array_send`) is the dimensions,
//! a has-NULL flag, the element type and each element's binary form with its length; the
//! text form (`array_out`) nests braces per dimension, quotes elements that would not
//! read back unquoted, and writes non-default lower bounds as `[0:1]=`.

use super::{scalar_binary_to_text, scalar_text_to_binary};

/// At most six dimensions (`MAXDIM`).
const MAXDIM: usize = 6;
/// The most elements an array may hold (`MaxArraySize`).
const MAX_ARRAY_SIZE: i64 = 0x3FF_FFFF;
/// OIDs below this are built in; `array_recv` refuses a mismatched element type only when
/// both are (`FirstGenbkiObjectId`).
const FIRST_GENBKI_OBJECT_ID: u32 = 10_000;

/// The element type of an array type known here.
pub(super) fn element_of(array_oid: u32) -> Option<u32> {
    use super::*;
    Some(match array_oid {
        1000 => BOOL,
        1001 => BYTEA,
        1002 => CHAR,
        1003 => NAME,
        1005 => INT2,
        1007 => INT4,
        1009 => TEXT,
        1014 => BPCHAR,
        1015 => VARCHAR,
        1016 => INT8,
        1021 => FLOAT4,
        1022 => FLOAT8,
        1028 => OID,
        199 => JSON,
        1115 => TIMESTAMP,
        1182 => DATE,
        1183 => TIME,
        1185 => TIMESTAMPTZ,
        1187 => INTERVAL,
        1231 => NUMERIC,
        1270 => TIMETZ,
        2951 => UUID,
        3807 => JSONB,
        _ => return None,
    })
}

/// An array's shape and its elements in row-major order (`None` for NULL).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Array<T> {
    /// (length, lower bound) per dimension; empty for the empty array.
    dims: Vec<(i32, i32)>,
    elements: Vec<Option<T>>,
}

/// `array_in` with each element read by the element type's input, then `array_send`.
pub(super) fn text_to_binary(element: u32, text: &[u8]) -> Option<Vec<u8>> {
    let array = parse(text)?;
    let mut out = Vec::new();
    let ndim = i32::try_from(array.dims.len()).ok()?;
    let has_null = array.elements.iter().any(Option::is_none);
    out.extend_from_slice(&ndim.to_be_bytes());
    out.extend_from_slice(&i32::from(has_null).to_be_bytes());
    out.extend_from_slice(&element.to_be_bytes());
    for (length, lower) in &array.dims {
        out.extend_from_slice(&length.to_be_bytes());
        out.extend_from_slice(&lower.to_be_bytes());
    }
    for value in &array.elements {
        match value {
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(text) => {
                let binary = scalar_text_to_binary(element, text)?;
                out.extend_from_slice(&i32::try_from(binary.len()).ok()?.to_be_bytes());
                out.extend_from_slice(&binary);
            }
        }
    }
    Some(out)
}

/// `array_recv` with each element read by the element type's receive, then `array_out`.
pub(super) fn binary_to_text(element: u32, bytes: &[u8]) -> Option<Vec<u8>> {
    let array = receive(element, bytes)?;
    let texts = array
        .elements
        .iter()
        .map(|value| match value {
            None => Some(None),
            Some(binary) => scalar_binary_to_text(element, binary).map(Some),
        })
        .collect::<Option<Vec<_>>>()?;
    Some(format(&array.dims, &texts))
}

/// `array_recv`'s checks: dimensions within `MAXDIM`, a flag of 0 or 1, the element type
/// (a different built-in one is refused), bounds that do not overflow, each element's
/// length within what is left, and nothing after the last.
fn receive(element: u32, bytes: &[u8]) -> Option<Array<&[u8]>> {
    let mut rest = bytes;
    let mut int = || -> Option<i32> {
        let (head, tail) = rest.split_first_chunk::<4>()?;
        rest = tail;
        Some(i32::from_be_bytes(*head))
    };
    let ndim = usize::try_from(int()?).ok().filter(|&n| n <= MAXDIM)?;
    if !matches!(int()?, 0 | 1) {
        return None;
    }
    let sent = u32::from_be_bytes(int()?.to_be_bytes());
    if sent != element && sent < FIRST_GENBKI_OBJECT_ID && element < FIRST_GENBKI_OBJECT_ID {
        return None;
    }
    let mut dims = Vec::with_capacity(ndim);
    let mut count: i64 = 1;
    for _ in 0..ndim {
        let (length, lower) = (int()?, int()?);
        if length < 0 || lower.checked_add(length).is_none() {
            return None;
        }
        count = count.checked_mul(i64::from(length))?;
        if count > MAX_ARRAY_SIZE {
            return None;
        }
        dims.push((length, lower));
    }
    if ndim == 0 || count == 0 {
        return rest.is_empty().then(|| Array {
            dims: Vec::new(),
            elements: Vec::new(),
        });
    }
    // Each element takes at least its four length bytes.
    let count = usize::try_from(count).ok()?;
    if count > rest.len() / 4 {
        return None;
    }
    let mut elements = Vec::with_capacity(count);
    for _ in 0..count {
        let (head, tail) = rest.split_first_chunk::<4>()?;
        let length = i32::from_be_bytes(*head);
        rest = tail;
        if length == -1 {
            elements.push(None);
            continue;
        }
        let length = usize::try_from(length).ok()?;
        let (value, tail) = rest.split_at_checked(length)?;
        elements.push(Some(value));
        rest = tail;
    }
    rest.is_empty().then_some(Array { dims, elements })
}

/// `array_out`: `[lb:ub]` per dimension first when any lower bound is not 1, then the
/// braces, NULL for NULL, each element quoted when it needs to be.
fn format(dims: &[(i32, i32)], elements: &[Option<Vec<u8>>]) -> Vec<u8> {
    let mut out = Vec::new();
    if dims.is_empty() {
        out.extend_from_slice(b"{}");
        return out;
    }
    if dims.iter().any(|&(_, lower)| lower != 1) {
        for &(length, lower) in dims {
            // receive checked lower + length, so the upper bound fits.
            let upper = i64::from(lower) + i64::from(length) - 1;
            out.extend_from_slice(format!("[{lower}:{upper}]").as_bytes());
        }
        out.push(b'=');
    }
    let lengths: Vec<usize> = dims
        .iter()
        .map(|&(length, _)| usize::try_from(length).unwrap_or(0))
        .collect();
    let mut next = elements.iter();
    nest(&mut out, &lengths, &mut next);
    out
}

fn nest<'e>(
    out: &mut Vec<u8>,
    lengths: &[usize],
    elements: &mut impl Iterator<Item = &'e Option<Vec<u8>>>,
) {
    let Some((&length, inner)) = lengths.split_first() else {
        match elements.next() {
            Some(Some(text)) => push_element(out, text),
            _ => out.extend_from_slice(b"NULL"),
        }
        return;
    };
    out.push(b'{');
    for i in 0..length {
        if i > 0 {
            out.push(b',');
        }
        nest(out, inner, elements);
    }
    out.push(b'}');
}

/// `array_isspace`.
fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// An element as `array_out` writes it: quoted (with `"` and `\` escaped) when empty,
/// when it spells NULL, or when it holds braces, quotes, backslashes, the delimiter or
/// whitespace.
fn push_element(out: &mut Vec<u8>, text: &[u8]) {
    let quote = text.is_empty()
        || text.eq_ignore_ascii_case(b"NULL")
        || text
            .iter()
            .any(|&b| matches!(b, b'"' | b'\\' | b'{' | b'}' | b',') || is_space(b));
    if !quote {
        out.extend_from_slice(text);
        return;
    }
    out.push(b'"');
    for &b in text {
        if b == b'"' || b == b'\\' {
            out.push(b'\\');
        }
        out.push(b);
    }
    out.push(b'"');
}

/// `array_in`'s reading of the text: optional `[lb:ub]` dimensions and `=`, then nested
/// braces of equal lengths at each level, elements quoted or not (unquoted ones trimmed of
/// whitespace, `NULL` in any case for NULL), `\` escaping the next byte in either.
fn parse(text: &[u8]) -> Option<Array<Vec<u8>>> {
    let mut parser = Parser { text, at: 0 };
    parser.skip_space();
    let mut given = Vec::new();
    while parser.peek() == Some(b'[') {
        parser.at += 1;
        if given.len() >= MAXDIM {
            return None;
        }
        let first = parser.bound()?;
        let (lower, upper) = if parser.peek() == Some(b':') {
            parser.at += 1;
            (first, parser.bound()?)
        } else {
            (1, first)
        };
        parser.expect(b']')?;
        if upper < lower {
            return None;
        }
        given.push((upper.checked_sub(lower)?.checked_add(1)?, lower));
        parser.skip_space();
    }
    if !given.is_empty() {
        parser.expect(b'=')?;
        parser.skip_space();
    }
    let mut elements = Vec::new();
    let lengths = parser.braces(0, &mut elements)?;
    parser.skip_space();
    if parser.at != text.len() {
        return None;
    }
    if lengths.contains(&0) {
        // `{}`, or `{{}}` and the like (PostgreSQL 17 and later; 15 refuses them).
        return given.is_empty().then(|| Array {
            dims: Vec::new(),
            elements: Vec::new(),
        });
    }
    let dims = if given.is_empty() {
        lengths.iter().map(|&length| (length, 1)).collect()
    } else {
        let matches = given.len() == lengths.len()
            && given
                .iter()
                .zip(&lengths)
                .all(|(&(length, _), &found)| length == found);
        if !matches {
            return None;
        }
        given
    };
    let count = lengths
        .iter()
        .try_fold(1i64, |count, &length| count.checked_mul(i64::from(length)))?;
    if count > MAX_ARRAY_SIZE {
        return None;
    }
    for &(length, lower) in &dims {
        lower.checked_add(length)?;
    }
    Some(Array { dims, elements })
}

struct Parser<'t> {
    text: &'t [u8],
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(is_space) {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek() == Some(byte)).then(|| self.at += 1)
    }

    /// A dimension bound: an optional sign and digits, within i32.
    fn bound(&mut self) -> Option<i32> {
        let start = self.at;
        if matches!(self.peek(), Some(b'+' | b'-')) {
            self.at += 1;
        }
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
        std::str::from_utf8(&self.text[start..self.at])
            .ok()?
            .parse()
            .ok()
    }

    /// One brace level at `depth`: its lengths (this level's first), the elements
    /// appended. `{}` has length 0; levels around it must all be empty alike.
    fn braces(&mut self, depth: usize, elements: &mut Vec<Option<Vec<u8>>>) -> Option<Vec<i32>> {
        if depth >= MAXDIM {
            return None;
        }
        self.expect(b'{')?;
        self.skip_space();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Some(vec![0]);
        }
        let mut count: i32 = 0;
        let mut inner: Option<Vec<i32>> = None;
        loop {
            self.skip_space();
            let lengths = if self.peek() == Some(b'{') {
                self.braces(depth + 1, elements)?
            } else {
                elements.push(self.element()?);
                Vec::new()
            };
            // Every item of a level is an element, or a sub-array of the same lengths.
            match &inner {
                None => inner = Some(lengths),
                Some(first) if *first == lengths => {}
                Some(_) => return None,
            }
            count = count.checked_add(1)?;
            self.skip_space();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    break;
                }
                _ => return None,
            }
        }
        let mut lengths = vec![count];
        lengths.extend(inner.unwrap_or_default());
        Some(lengths)
    }

    /// One element, quoted or not; `None` inside for an unquoted NULL.
    fn element(&mut self) -> Option<Option<Vec<u8>>> {
        let mut value = Vec::new();
        if self.peek() == Some(b'"') {
            self.at += 1;
            loop {
                match self.peek()? {
                    b'"' => {
                        self.at += 1;
                        return Some(Some(value));
                    }
                    b'\\' => {
                        self.at += 1;
                        value.push(self.peek()?);
                    }
                    b => value.push(b),
                }
                self.at += 1;
            }
        }
        // Unquoted: up to the delimiter or the closing brace; trailing whitespace that
        // was not escaped is not part of it.
        let mut escaped = false;
        let mut kept = 0;
        loop {
            match self.peek()? {
                b',' | b'}' => break,
                b'{' | b'"' => return None,
                b'\\' => {
                    self.at += 1;
                    value.push(self.peek()?);
                    escaped = true;
                    kept = value.len();
                }
                b => {
                    value.push(b);
                    if !is_space(b) {
                        kept = value.len();
                    }
                }
            }
            self.at += 1;
        }
        value.truncate(kept);
        if value.is_empty() && !escaped {
            return None;
        }
        if !escaped && value.eq_ignore_ascii_case(b"NULL") {
            return Some(None);
        }
        Some(Some(value))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{binary_to_text, text_to_binary};
    use super::*;
    use pgoutput_codec::Oid;

    const BOOL_ARRAY: u32 = 1000;
    const BYTEA_ARRAY: u32 = 1001;
    const CHAR_ARRAY: u32 = 1002;
    const NAME_ARRAY: u32 = 1003;
    const INT2_ARRAY: u32 = 1005;
    const INT4_ARRAY: u32 = 1007;
    const TEXT_ARRAY: u32 = 1009;
    const BPCHAR_ARRAY: u32 = 1014;
    const VARCHAR_ARRAY: u32 = 1015;
    const INT8_ARRAY: u32 = 1016;
    const FLOAT4_ARRAY: u32 = 1021;
    const FLOAT8_ARRAY: u32 = 1022;
    const OID_ARRAY: u32 = 1028;
    const JSON_ARRAY: u32 = 199;
    const TIMESTAMP_ARRAY: u32 = 1115;
    const DATE_ARRAY: u32 = 1182;
    const TIME_ARRAY: u32 = 1183;
    const TIMESTAMPTZ_ARRAY: u32 = 1185;
    const INTERVAL_ARRAY: u32 = 1187;
    const NUMERIC_ARRAY: u32 = 1231;
    const TIMETZ_ARRAY: u32 = 1270;
    const UUID_ARRAY: u32 = 2951;
    const JSONB_ARRAY: u32 = 3807;

    /// `SELECT x::text, encode(array_send(x), 'hex') FROM (SELECT $1::<type> AS x) v` on
    /// PostgreSQL 15.18: (array type, input, text, hex).
    const ARRAYS: &[(u32, &str, &str, &str)] = &[
        (INT4_ARRAY, "{}", "{}", "000000000000000000000017"),
        (INT4_ARRAY, "{ }", "{}", "000000000000000000000017"),
        (INT4_ARRAY, "{1,2,NULL}", "{1,2,NULL}", "000000010000000100000017000000030000000100000004000000010000000400000002ffffffff"),
        (INT4_ARRAY, "{{1,2},{3,4}}", "{{1,2},{3,4}}", "000000020000000000000017000000020000000100000002000000010000000400000001000000040000000200000004000000030000000400000004"),
        (INT4_ARRAY, "[0:1]={1,2}", "[0:1]={1,2}", "000000010000000000000017000000020000000000000004000000010000000400000002"),
        (INT4_ARRAY, "[0:1][1:2]={{1,2},{3,4}}", "[0:1][1:2]={{1,2},{3,4}}", "000000020000000000000017000000020000000000000002000000010000000400000001000000040000000200000004000000030000000400000004"),
        (INT4_ARRAY, "{ 1 , 2 }", "{1,2}", "000000010000000000000017000000020000000100000004000000010000000400000002"),
        (INT4_ARRAY, "[1:2]={1,2}", "{1,2}", "000000010000000000000017000000020000000100000004000000010000000400000002"),
        (INT4_ARRAY, "[2]={1,2}", "{1,2}", "000000010000000000000017000000020000000100000004000000010000000400000002"),
        (INT4_ARRAY, "  {1}  ", "{1}", "00000001000000000000001700000001000000010000000400000001"),
        (INT4_ARRAY, "{\"1\"}", "{1}", "00000001000000000000001700000001000000010000000400000001"),
        (INT4_ARRAY, "{null}", "{NULL}", "0000000100000001000000170000000100000001ffffffff"),
        (INT4_ARRAY, "{\\1}", "{1}", "00000001000000000000001700000001000000010000000400000001"),
        (INT4_ARRAY, "{\"1\" ,2}", "{1,2}", "000000010000000000000017000000020000000100000004000000010000000400000002"),
        (INT4_ARRAY, "[-2147483648:-2147483647]={1,2}", "[-2147483648:-2147483647]={1,2}", "000000010000000000000017000000028000000000000004000000010000000400000002"),
        (INT4_ARRAY, "{{{1}},{{2}}}", "{{{1}},{{2}}}", "00000003000000000000001700000002000000010000000100000001000000010000000100000004000000010000000400000002"),
        (INT4_ARRAY, "{{NULL,NULL}}", "{{NULL,NULL}}", "00000002000000010000001700000001000000010000000200000001ffffffffffffffff"),
        (INT4_ARRAY, "[-1:-1]={7}", "[-1:-1]={7}", "00000001000000000000001700000001ffffffff0000000400000007"),
        (INT4_ARRAY, "{{{{{{1}}}}}}", "{{{{{{1}}}}}}", "0000000600000000000000170000000100000001000000010000000100000001000000010000000100000001000000010000000100000001000000010000000400000001"),
        (TEXT_ARRAY, "{\"\",\"NULL\",\"null\",\"a b\",\"a,b\",\"a\\\"b\",\"a\\\\b\",\"{x}\",\"tab\there\",plain,NULL,é}", "{\"\",\"NULL\",\"null\",\"a b\",\"a,b\",\"a\\\"b\",\"a\\\\b\",\"{x}\",\"tab\there\",plain,NULL,é}", "0000000100000001000000190000000c0000000100000000000000044e554c4c000000046e756c6c0000000361206200000003612c620000000361226200000003615c62000000037b787d00000008746162096865726500000005706c61696effffffff00000002c3a9"),
        (TEXT_ARRAY, "{ a b , \" c \" , d\\ , \\ e}", "{\"a b\",\" c \",\"d \",\" e\"}", "00000001000000000000001900000004000000010000000361206200000003206320000000026420000000022065"),
        (TEXT_ARRAY, "{a\u{b}b}", "{\"a\u{b}b\"}", "000000010000000000000019000000010000000100000003610b62"),
        (TEXT_ARRAY, "{a\u{1}b}", "{a\u{1}b}", "000000010000000000000019000000010000000100000003610162"),
        (TEXT_ARRAY, "{\"\u{a0}\"}", "{\u{a0}}", "000000010000000000000019000000010000000100000002c2a0"),
        (TEXT_ARRAY, "{NuLl,\"nULL\"}", "{NULL,\"nULL\"}", "0000000100000001000000190000000200000001ffffffff000000046e554c4c"),
        (TEXT_ARRAY, "{\\N\\U\\L\\L}", "{\"NULL\"}", "0000000100000000000000190000000100000001000000044e554c4c"),
        (TEXT_ARRAY, "{{a,b},{c,d}}", "{{a,b},{c,d}}", "000000020000000000000019000000020000000100000002000000010000000161000000016200000001630000000164"),
        (TEXT_ARRAY, "{\"\\{\\}\"}", "{\"{}\"}", "0000000100000000000000190000000100000001000000027b7d"),
        (TEXT_ARRAY, "{x y}", "{\"x y\"}", "000000010000000000000019000000010000000100000003782079"),
        (TEXT_ARRAY, "{'q'}", "{'q'}", "000000010000000000000019000000010000000100000003277127"),
        (TEXT_ARRAY, "{a=b}", "{a=b}", "000000010000000000000019000000010000000100000003613d62"),
        (TEXT_ARRAY, "{[1]}", "{[1]}", "0000000100000000000000190000000100000001000000035b315d"),
        (TEXT_ARRAY, "{\"a\nb\"}", "{\"a\nb\"}", "000000010000000000000019000000010000000100000003610a62"),
        (BYTEA_ARRAY, "{\"\\\\x0a0b\",NULL,\"\\\\x\"}", "{\"\\\\x0a0b\",NULL,\"\\\\x\"}", "0000000100000001000000110000000300000001000000020a0bffffffff00000000"),
        (BOOL_ARRAY, "{t,f,NULL}", "{t,f,NULL}", "000000010000000100000010000000030000000100000001010000000100ffffffff"),
        (BOOL_ARRAY, "{true,no}", "{t,f}", "000000010000000000000010000000020000000100000001010000000100"),
        (INT2_ARRAY, "{-32768,32767}", "{-32768,32767}", "0000000100000000000000150000000200000001000000028000000000027fff"),
        (INT8_ARRAY, "{9000000000,-1}", "{9000000000,-1}", "0000000100000000000000140000000200000001000000080000000218711a0000000008ffffffffffffffff"),
        (FLOAT8_ARRAY, "{1e20,0.1,NaN,-Infinity,-0}", "{1e+20,0.1,NaN,-Infinity,-0}", "0000000100000000000002bd0000000500000001000000084415af1d78b58c40000000083fb999999999999a000000087ff800000000000000000008fff0000000000000000000088000000000000000"),
        (FLOAT4_ARRAY, "{0.1,1.5,1e10}", "{0.1,1.5,1e+10}", "0000000100000000000002bc0000000300000001000000043dcccccd000000043fc0000000000004501502f9"),
        (OID_ARRAY, "{0,4294967295}", "{0,4294967295}", "00000001000000000000001a0000000200000001000000040000000000000004ffffffff"),
        (NUMERIC_ARRAY, "{10.50,-0.5,NaN,Infinity,0.00,1e-3}", "{10.50,-0.5,NaN,Infinity,0.00,0.001}", "0000000100000000000006a400000006000000010000000c0002000000000002000a13880000000a0001ffff4000000113880000000800000000c00000000000000800000000d00000200000000800000000000000020000000a0001ffff00000003000a"),
        (DATE_ARRAY, "{2024-01-02,infinity,-infinity,\"0001-01-01 BC\",NULL}", "{2024-01-02,infinity,-infinity,\"0001-01-01 BC\",NULL}", "00000001000000010000043a0000000500000001000000040000223f000000047fffffff000000048000000000000004fff4da8bffffffff"),
        (TIME_ARRAY, "{03:04:05.5,24:00:00}", "{03:04:05.5,24:00:00}", "00000001000000000000043b00000002000000010000000800000002925cf46000000008000000141dd76000"),
        (TIMETZ_ARRAY, "{03:04:05+05:30,00:00:00+00}", "{03:04:05+05:30,00:00:00+00}", "0000000100000000000004f200000002000000010000000c0000000292555340ffffb2a80000000c000000000000000000000000"),
        (TIMESTAMP_ARRAY, "{\"2024-01-02 03:04:05.5\",infinity}", "{\"2024-01-02 03:04:05.5\",infinity}", "00000001000000000000045a0000000200000001000000080002b0ec851d9460000000087fffffffffffffff"),
        (TIMESTAMPTZ_ARRAY, "{\"2024-01-02 03:04:05+02\",\"0001-01-01 00:00:00+00 BC\"}", "{\"2024-01-02 01:04:05+00\",\"0001-01-01 00:00:00+00 BC\"}", "0000000100000000000004a00000000200000001000000080002b0ead7eeab4000000008ff1fc63d1bb12000"),
        (INTERVAL_ARRAY, "{\"1 day\",\"-1 days +02:00:00\",00:00:00,\"1 year 2 mons\"}", "{\"1 day\",\"-1 days +02:00:00\",00:00:00,\"1 year 2 mons\"}", "0000000100000000000004a2000000040000000100000010000000000000000000000001000000000000001000000001ad274800ffffffff000000000000001000000000000000000000000000000000000000100000000000000000000000000000000e"),
        (UUID_ARRAY, "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}", "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}", "000000010000000100000b86000000020000000100000010a0eebc999c0b4ef8bb6d6bb9bd380a11ffffffff"),
        (JSONB_ARRAY, "{\"{\\\"a\\\": 1}\",null,\"[1, 2]\",\"\\\"s\\\"\"}", "{\"{\\\"a\\\": 1}\",NULL,\"[1, 2]\",\"\\\"s\\\"\"}", "000000010000000100000eda000000040000000100000009017b2261223a20317dffffffff00000007015b312c20325d0000000401227322"),
        (JSON_ARRAY, "{\"{\\\"a\\\":1}\",\"[ 1 ]\"}", "{\"{\\\"a\\\":1}\",\"[ 1 ]\"}", "0000000100000000000000720000000200000001000000077b2261223a317d000000055b2031205d"),
        (NAME_ARRAY, "{pg_class,\"a b\"}", "{pg_class,\"a b\"}", "00000001000000000000001300000002000000010000000870675f636c61737300000003612062"),
        (CHAR_ARRAY, "{a,b,NULL}", "{a,b,NULL}", "000000010000000100000012000000030000000100000001610000000162ffffffff"),
        (BPCHAR_ARRAY, "{\"ab \",c}", "{\"ab \",c}", "0000000100000000000004120000000200000001000000036162200000000163"),
        (VARCHAR_ARRAY, "{abc,\"\",NULL}", "{abc,\"\",NULL}", "00000001000000010000041300000003000000010000000361626300000000ffffffff"),
    ];
    /// Inputs the same query refuses.
    const ARRAYS_REFUSED: &[(u32, &str)] = &[
        (INT4_ARRAY, "{1,{2}}"),
        (INT4_ARRAY, "{{1},2}"),
        (INT4_ARRAY, "{{1,2},{3}}"),
        (INT4_ARRAY, "{,}"),
        (INT4_ARRAY, "{1,}"),
        (INT4_ARRAY, "[1:0]={}"),
        (INT4_ARRAY, "{1} x"),
        (INT4_ARRAY, "{\"NULL\"}"),
        (INT4_ARRAY, "{\"1\"2}"),
        (INT4_ARRAY, "{1\"2\"}"),
        (INT4_ARRAY, "[2147483647:2147483647]={1}"),
        (INT4_ARRAY, "[1:3]={1,2}"),
        (INT4_ARRAY, "[1:2]={{1,2}}"),
        (INT4_ARRAY, "1"),
        (INT4_ARRAY, ""),
        (INT4_ARRAY, "{"),
        (INT4_ARRAY, "{1"),
        (INT4_ARRAY, "{{{{{{{1}}}}}}}"),
        (INT4_ARRAY, "[1:2]{1,2}"),
        (INT4_ARRAY, "{x}"),
        (INT4_ARRAY, "[0:1]={}"),
        (TEXT_ARRAY, "{\"a}"),
        (TEXT_ARRAY, "{a\\}"),
        (TEXT_ARRAY, "{a,\"b}"),
        (TEXT_ARRAY, "{{a},b}"),
        (TEXT_ARRAY, "{\"a\"b}"),
    ];

    /// `COPY t (x int4[]) FROM STDIN (FORMAT binary)` then `SELECT x::text` on PostgreSQL
    /// 15.18: (binary, text), `None` where the server refused the value.
    const RECEIVED: &[(&str, Option<&str>)] = &[
        ("00000001 00000000 00000017 00000002 00000001 00000004 00000001 00000004 00000002", Some("{1,2}")),
        ("00000001 00000000 00000017 00000002 00000001 00000004 00000001 ffffffff", Some("{1,NULL}")),
        ("00000001 00000002 00000017 00000001 00000001 00000004 00000001", None),
        ("00000007 00000000 00000017 0000000100000001 0000000100000001 0000000100000001 0000000100000001 0000000100000001 0000000100000001 0000000100000001 0000000400000001", None),
        ("ffffffff 00000000 00000017", None),
        ("00000001 00000000 00000014 00000001 00000001 00000004 00000001", None),
        ("00000001 00000000 00004e20 00000001 00000001 00000004 00000001", Some("{1}")),
        ("00000001 00000000 00000017 00000000 00000005", Some("{}")),
        ("00000002 00000000 00000017 00000002 00000001 00000000 00000001", Some("{}")),
        ("00000001 00000000 00000017 ffffffff 00000001", None),
        ("00000001 00000000 00000017 00000001 7fffffff 00000004 00000001", None),
        ("00000001 00000000 00000017 00000001 7ffffffe 00000004 00000001", Some("[2147483646:2147483646]={1}")),
        ("00000001 00000000 00000017 00000001 00000001 fffffffe", None),
        ("00000001 00000000 00000017 00000001 00000001 00000003 000001", None),
        ("00000001 00000000 00000017 00000001 00000001 00000004 00000001 00", None),
        ("00000000 00000000 00000017 00", None),
        ("00000000 00000000 00000017", Some("{}")),
        ("00000000 00000001 00000017", Some("{}")),
        ("00000001 00000000 00000017 00000002 00000001 00000004 00000001", None),
        ("00000001 00000000 00000017 00000001 00000001 00000008 00000001", None),
        ("00000001 00000000 00000017 00000001 00000000 00000004 00000001", Some("[0:0]={1}")),
        ("00000001 00000000 00000017 00000001 80000000 00000004 00000001", Some("[-2147483648:-2147483648]={1}")),
        ("00000000 00000000", None),
    ];

    /// `SELECT x::text, encode(array_send(x), 'hex') FROM (SELECT $1::int4[] AS x) v` on
    /// PostgreSQL 18.6, which reads nested empty braces as the empty array (15.18 refuses
    /// them); the inputs it refuses after.
    const ARRAYS_18: &[(u32, &str, &str, &str)] = &[
        (INT4_ARRAY, "{{}}", "{}", "000000000000000000000017"),
        (INT4_ARRAY, "{{},{}}", "{}", "000000000000000000000017"),
        (INT4_ARRAY, "{{{}},{{}}}", "{}", "000000000000000000000017"),
        (INT4_ARRAY, "{ { } }", "{}", "000000000000000000000017"),
    ];
    const ARRAYS_18_REFUSED: &[(u32, &str)] = &[
        (INT4_ARRAY, "{{},{1}}"),
        (INT4_ARRAY, "{{1},{}}"),
        (INT4_ARRAY, "{{{}},{}}"),
        (INT4_ARRAY, "[1:1]={{}}"),
        (INT4_ARRAY, "{}}"),
        (INT4_ARRAY, "{{}"),
    ];

    #[test]
    fn matches_the_server() {
        for &(oid, input, text, hex) in ARRAYS.iter().chain(ARRAYS_18) {
            let bytes = hex::decode(hex).unwrap();
            let to_binary = |text: &str| text_to_binary(Oid(oid), text.as_bytes());
            assert_eq!(to_binary(input), Some(bytes.clone()), "input {input:?}");
            let out = binary_to_text(Oid(oid), &bytes);
            assert_eq!(out.as_deref(), Some(text.as_bytes()), "output of {input:?}");
            assert_eq!(to_binary(text), Some(bytes), "round trip of {input:?}");
        }
        for &(oid, input) in ARRAYS_REFUSED.iter().chain(ARRAYS_18_REFUSED) {
            assert_eq!(
                text_to_binary(Oid(oid), input.as_bytes()),
                None,
                "refused {input:?}"
            );
        }
        for &(hex, text) in RECEIVED {
            let bytes = hex::decode(hex.replace(' ', "")).unwrap();
            let out = binary_to_text(Oid(INT4_ARRAY), &bytes);
            assert_eq!(out.as_deref(), text.map(str::as_bytes), "received {hex}");
        }
    }

    #[test]
    fn every_array_type_has_its_element() {
        for (array, element) in [
            (BOOL_ARRAY, 16),
            (NAME_ARRAY, 19),
            (JSON_ARRAY, 114),
            (JSONB_ARRAY, 3802),
        ] {
            assert_eq!(element_of(array), Some(element));
        }
        assert_eq!(element_of(16), None);
        // An element count the bytes cannot hold is refused before anything is allocated.
        let huge = hex::decode("00000002000000000000001700002000000000010000200000000001").unwrap();
        assert_eq!(binary_to_text(Oid(INT4_ARRAY), &huge), None);
    }
}
