//! uuid: sixteen bytes, written as lowercase hex in groups of 8-4-4-4-12.

/// `uuid_in` (`string_to_uuid`): 32 hex digits in either case, optionally in braces, with
/// an optional `-` after any group of four digits but the last; nothing else, not even
/// whitespace.
pub(super) fn text_to_binary(text: &[u8]) -> Option<[u8; 16]> {
    let (mut rest, braces) = match text.strip_prefix(b"{") {
        Some(inner) => (inner, true),
        None => (text, false),
    };
    let mut uuid = [0u8; 16];
    for (i, byte) in uuid.iter_mut().enumerate() {
        let (pair, tail) = rest.split_first_chunk::<2>()?;
        let pair = std::str::from_utf8(pair).ok()?;
        if !pair.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        *byte = u8::from_str_radix(pair, 16).ok()?;
        rest = tail;
        if i % 2 == 1 && i < 15 {
            rest = rest.strip_prefix(b"-").unwrap_or(rest);
        }
    }
    if braces {
        rest = rest.strip_prefix(b"}")?;
    }
    rest.is_empty().then_some(uuid)
}

/// `uuid_out`.
pub(super) fn binary_to_text(bytes: &[u8]) -> Option<String> {
    let bytes: &[u8; 16] = bytes.try_into().ok()?;
    let hex = hex::encode(bytes);
    Some(format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SELECT x::text, encode(uuid_send(x), 'hex') FROM (SELECT $1::uuid AS x) v` on
    /// PostgreSQL 15.18; the inputs it refused are listed after.
    #[test]
    fn matches_the_server() {
        let text = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";
        let hex = "a0eebc999c0b4ef8bb6d6bb9bd380a11";
        for input in [
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
            "{a0eebc99-9c0b4ef8-bb6d6bb9bd380a11}",
            "a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
        ] {
            let binary = text_to_binary(input.as_bytes()).unwrap();
            assert_eq!(hex::encode(binary), hex, "{input}");
            assert_eq!(binary_to_text(&binary).unwrap(), text);
        }
        for refused in [
            " a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11 ",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1-1",
            "{a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-",
            "a0eebc99",
            "",
        ] {
            assert_eq!(text_to_binary(refused.as_bytes()), None, "{refused:?}");
        }
        assert_eq!(binary_to_text(&[0; 15]), None);
    }
}
