//! Reading messages from standard input (or a file): hex lines, or length-prefixed binary.

use std::io::{self, BufRead, Read};

use clap::ValueEnum;

use crate::hex::parse_hex;

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
pub struct Frame {
    /// The line (hex) or message number (raw), counting from 1.
    pub position: usize,
    pub bytes: Result<Vec<u8>, String>,
}

impl Frame {
    /// How errors name this frame.
    pub fn label(&self, format: InputFormat) -> String {
        match format {
            InputFormat::Hex => format!("line {}", self.position),
            InputFormat::Raw => format!("message {}", self.position),
        }
    }
}

/// Every message of `reader` in `format`, in order.
pub fn frames(
    reader: impl Read + 'static,
    format: InputFormat,
) -> Box<dyn Iterator<Item = io::Result<Frame>>> {
    match format {
        InputFormat::Hex => Box::new(hex_frames(io::BufReader::new(reader))),
        InputFormat::Raw => Box::new(raw_frames(reader)),
    }
}

fn hex_frames(reader: impl BufRead + 'static) -> impl Iterator<Item = io::Result<Frame>> {
    reader.lines().enumerate().filter_map(|(index, line)| {
        let line = match line {
            Ok(line) => line,
            Err(err) => return Some(Err(err)),
        };
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            return None;
        }
        Some(Ok(Frame {
            position: index + 1,
            bytes: parse_hex(trimmed),
        }))
    })
}

fn raw_frames(mut reader: impl Read + 'static) -> impl Iterator<Item = io::Result<Frame>> {
    let mut position = 0;
    std::iter::from_fn(move || {
        let mut len = [0; 4];
        match reader.read_exact(&mut len) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::UnexpectedEof => return None,
            Err(err) => return Some(Err(err)),
        }
        position += 1;
        let len = u32::from_be_bytes(len) as usize;
        let mut bytes = Vec::new();
        let read = (&mut reader).take(len as u64).read_to_end(&mut bytes);
        Some(read.map(|n| Frame {
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
