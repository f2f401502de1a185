//! `decode`, `encode` and `check`: between bytes and JSON, through the session codec.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use pgoutput_codec::{Decoder, Encoder, PgOutputMessage};

use super::input::{messages, text_lines, InputFormat};
use super::{SessionArgs, Stop};

#[derive(Debug, Args)]
pub struct DecodeArgs {
    #[command(flatten)]
    session: SessionArgs,
    /// How the messages are written in the input.
    #[arg(long, value_enum, default_value_t = InputFormat::Hex)]
    input: InputFormat,
    /// Read this file instead of standard input.
    file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct EncodeArgs {
    #[command(flatten)]
    session: SessionArgs,
    /// Read this file of JSON lines instead of standard input.
    file: Option<PathBuf>,
}

fn open(file: &Option<PathBuf>) -> Result<Box<dyn Read>, String> {
    match file {
        Some(path) => File::open(path)
            .map(|f| Box::new(f) as Box<dyn Read>)
            .map_err(|e| format!("{}: {e}", path.display())),
        None => Ok(Box::new(io::stdin())),
    }
}

/// A failure to read the input.
fn io_error(err: io::Error) -> String {
    format!("I/O error: {err}")
}

/// Bytes in, JSON lines out.
pub fn decode(args: &DecodeArgs) -> Result<ExitCode, Stop> {
    let mut decoder = Decoder::with_ctx(args.session.ctx()?);
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let mut failed = 0;
    for message in messages(open(&args.file)?, args.input) {
        let message = message.map_err(io_error)?;
        let label = message.label(args.input);
        let decoded = message
            .bytes
            .and_then(|bytes| match decoder.decode(&bytes) {
                Ok(message) => serde_json::to_string(&message).map_err(|e| e.to_string()),
                Err(err) => Err(err.to_string()),
            });
        match decoded {
            Ok(json) => writeln!(out, "{json}").map_err(Stop::output)?,
            Err(err) => {
                failed += 1;
                out.flush().map_err(Stop::output)?;
                eprintln!("{label}: {err}");
            }
        }
    }
    out.flush().map_err(Stop::output)?;
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// JSON lines in, hex lines out.
pub fn encode(args: &EncodeArgs) -> Result<ExitCode, Stop> {
    let mut encoder = Encoder::with_ctx(args.session.ctx()?);
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let mut failed = 0;
    for (index, line) in text_lines(open(&args.file)?).enumerate() {
        let encoded = match line.map_err(io_error)? {
            // One bad byte spoils its line, not the run.
            Err(err) => Err(err),
            Ok(line) => {
                let trimmed = line.trim();
                if trimmed.is_empty() || trimmed.starts_with('#') {
                    continue;
                }
                serde_json::from_str::<PgOutputMessage<'_>>(trimmed)
                    .map_err(|e| format!("invalid JSON message: {e}"))
                    .and_then(|message| encoder.encode(&message).map_err(|e| e.to_string()))
            }
        };
        match encoded {
            Ok(bytes) => writeln!(out, "{}", hex::encode(&bytes)).map_err(Stop::output)?,
            Err(err) => {
                failed += 1;
                out.flush().map_err(Stop::output)?;
                eprintln!("line {}: {err}", index + 1);
            }
        }
    }
    out.flush().map_err(Stop::output)?;
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Decode and re-encode; report what does not come back.
pub fn check(args: &DecodeArgs) -> Result<ExitCode, Stop> {
    let ctx = args.session.ctx()?;
    let mut decoder = Decoder::with_ctx(ctx);
    let mut encoder = Encoder::with_ctx(ctx);
    let (mut passed, mut failed) = (0usize, 0usize);
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    for message in messages(open(&args.file)?, args.input) {
        let message = message.map_err(io_error)?;
        let label = message.label(args.input);
        let outcome = message.bytes.and_then(|bytes| {
            let message = decoder.decode(&bytes).map_err(|e| e.to_string())?;
            // Keep the encoder's stream state in step with the decoder's.
            let again = encoder
                .encode(&message)
                .map_err(|e| format!("re-encoding failed: {e}"))?;
            if again == bytes {
                return Ok(());
            }
            let at = again
                .iter()
                .zip(&bytes)
                .position(|(a, b)| a != b)
                .unwrap_or(again.len().min(bytes.len()));
            Err(format!(
                "re-encoded bytes differ from the input at byte {at}: input {}, re-encoded {}",
                hex::encode(&bytes),
                hex::encode(&again)
            ))
        });
        match outcome {
            Ok(()) => passed += 1,
            Err(err) => {
                failed += 1;
                writeln!(out, "{label}: {err}").map_err(Stop::output)?;
            }
        }
    }
    writeln!(out, "{passed} passed, {failed} failed").map_err(Stop::output)?;
    out.flush().map_err(Stop::output)?;
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
