//! Reading messages from standard input (or a file): hex lines, or length-prefixed binary.

use std::io::{self, BufRead, Read};

use clap::ValueEnum;

pub const FORMATS_HELP: &str = "\
Input formats (--input):
  hex  One message per line as hex digits, upper or lower case; spaces between digits are
       ignored. Blank lines and lines starting with # are skipped. Errors name the line.
  raw  Binary: each message is a 4-byte big-endian length, then that many bytes (the
       CopyData payload framing without the type byte). Errors name the message's number.

Example:
  printf '41000002e8000002e9\\n' | pgoutput decode --proto-version 4 --streaming on";

/// `--input`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InputFormat {
    /// One hex-encoded message per line.
    Hex,
    /// Length-prefixed binary messages.
    Raw,
}

/// One message read from the input, or why it could not be read.
pub struct InputMessage {
    /// The line (hex) or message number (raw), counting from 1.
    pub position: usize,
    pub bytes: Result<Vec<u8>, String>,
}

impl InputMessage {
    /// How errors name this message.
    pub fn label(&self, format: InputFormat) -> String {
        match format {
            InputFormat::Hex => format!("line {}", self.position),
            InputFormat::Raw => format!("message {}", self.position),
        }
    }
}

/// Every message of `reader` in `format`, in order.
pub fn messages(
    reader: impl Read + 'static,
    format: InputFormat,
) -> Box<dyn Iterator<Item = io::Result<InputMessage>>> {
    match format {
        InputFormat::Hex => Box::new(hex_messages(reader)),
        InputFormat::Raw => Box::new(raw_messages(reader)),
    }
}

/// The lines of a text input: each is its text, or why it is not UTF-8 (which spoils that
/// line only). An I/O error ends the input.
pub fn text_lines(
    reader: impl Read + 'static,
) -> impl Iterator<Item = io::Result<Result<String, String>>> {
    io::BufReader::new(reader).split(b'\n').map(|line| {
        line.map(|mut bytes| {
            if bytes.last() == Some(&b'\r') {
                bytes.pop();
            }
            String::from_utf8(bytes).map_err(|e| {
                format!(
                    "not UTF-8 (invalid byte at column {})",
                    e.utf8_error().valid_up_to() + 1
                )
            })
        })
    })
}

fn hex_messages(reader: impl Read + 'static) -> impl Iterator<Item = io::Result<InputMessage>> {
    text_lines(reader).enumerate().filter_map(|(index, line)| {
        let line = match line {
            Ok(line) => line,
            Err(err) => return Some(Err(err)),
        };
        let bytes = match line {
            Ok(line) => {
                let trimmed = line.trim();
                if trimmed.is_empty() || trimmed.starts_with('#') {
                    return None;
                }
                parse_hex(trimmed)
            }
            Err(err) => Err(err),
        };
        Some(Ok(InputMessage {
            position: index + 1,
            bytes,
        }))
    })
}

/// A hex line's bytes; spaces between the digits are ignored.
fn parse_hex(line: &str) -> Result<Vec<u8>, String> {
    let digits: String = line.split_ascii_whitespace().collect();
    hex::decode(&digits).map_err(|err| match err {
        hex::FromHexError::InvalidHexCharacter { c, .. } => {
            format!("invalid hex: {c:?} is not a hex digit")
        }
        hex::FromHexError::OddLength => {
            format!("invalid hex: odd number of digits ({})", digits.len())
        }
        other => format!("invalid hex: {other}"),
    })
}

fn raw_messages(mut reader: impl Read + 'static) -> impl Iterator<Item = io::Result<InputMessage>> {
    let mut position = 0;
    let mut ended = false;
    std::iter::from_fn(move || {
        if ended {
            return None;
        }
        let mut len = [0; 4];
        let got = match read_full(&mut reader, &mut len) {
            Ok(got) => got,
            Err(err) => return Some(Err(err)),
        };
        if got == 0 {
            return None;
        }
        position += 1;
        if got < 4 {
            // A cut-off prefix is damage, not a clean end.
            ended = true;
            return Some(Ok(InputMessage {
                position,
                bytes: Err(format!(
                    "input ended inside the 4-byte length prefix ({got} bytes of it)"
                )),
            }));
        }
        let len = u32::from_be_bytes(len) as usize;
        let mut bytes = Vec::new();
        let read = (&mut reader).take(len as u64).read_to_end(&mut bytes);
        Some(read.map(|n| InputMessage {
            position,
            bytes: if n == len {
                Ok(bytes)
            } else {
                Err(format!(
                    "input ended after {n} of the {len} bytes the length prefix announced"
                ))
            },
        }))
    })
}

/// Reads until `buf` is full or the input ends; the number of bytes read.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        }
    }
    Ok(got)
}
