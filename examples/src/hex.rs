//! Hex text for messages, as the CLI reads and writes it and the examples and tests print
//! it: lower case out; upper or lower case, with optional spaces between digits, in.
//!
//! ```
//! use pgoutput_examples::hex::{parse_hex, to_hex};
//!
//! assert_eq!(parse_hex("41 00 0A ff"), Ok(vec![0x41, 0x00, 0x0a, 0xff]));
//! assert_eq!(to_hex(&[0x41, 0x0a]), "410a");
//! assert!(parse_hex("4z").is_err() && parse_hex("410").is_err());
//! ```

/// Hex digits (spaces allowed between them) to bytes.
pub fn parse_hex(text: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if let Some(at) = digits.iter().position(|b| !b.is_ascii_hexdigit()) {
        return Err(format!(
            "invalid hex: {:?} is not a hex digit",
            char::from(digits[at])
        ));
    }
    if !digits.len().is_multiple_of(2) {
        return Err(format!(
            "invalid hex: odd number of digits ({})",
            digits.len()
        ));
    }
    Ok(digits
        .chunks(2)
        .map(|pair| {
            let nibble = |d: u8| (d as char).to_digit(16).unwrap_or(0) as u8;
            nibble(pair[0]) << 4 | nibble(pair[1])
        })
        .collect())
}

/// Lower-case hex.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
