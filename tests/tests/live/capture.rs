//! With `PGOUTPUT_LIVE_CAPTURE=<dir>`, writes a few reads of each server as hex-line files
//! for the `pgoutput` CLI tests (`crates/cli/tests/data/`). Together they hold every message
//! type from both versions. Bulk rows beyond the first few are left out to keep the files
//! small, and so are the stream blocks that leaves empty.

use std::fmt::Display;
use std::fs;
use std::path::Path;

use pgoutput_codec::{Decoder, Oid, PgOutputMessage, Streaming};
use pgoutput_tests::hex;
use pgoutput_tests::pg::Server;

use crate::scenario::Facts;
use crate::{Options, Row};

/// The reads worth keeping: between them, every message type on each server.
pub fn wanted(options: &Options) -> bool {
    let v = options.version.number();
    match (options.slot, options.streaming) {
        ("two_phase", Streaming::Off) => v == 3,
        ("two_phase", Streaming::On) => v == 3,
        ("two_phase", Streaming::Parallel) => true,
        ("plain", Streaming::Off) => v == 1 && options.binary,
        _ => false,
    }
}

pub fn write(
    dir: &Path,
    server: &Server,
    facts: &Facts,
    options: &Options,
    rows: &[Row],
) -> Result<(), String> {
    let bulk: Oid = facts.relations["bulk"];
    let mut decoder =
        Decoder::new(options.version, options.streaming).map_err(|e| e.to_string())?;
    let mut kept: Vec<(char, &Row)> = Vec::new();
    let mut bulk_rows = 0;
    for row in rows {
        let message = decoder.decode(&row.data).map_err(|e| e.to_string())?;
        if matches!(&message, PgOutputMessage::Insert(i) if i.relation_oid == bulk) {
            bulk_rows += 1;
            if bulk_rows > 5 {
                continue;
            }
        }
        let tag = char::from(row.data[0]);
        if tag == 'E' && kept.last().is_some_and(|(t, _)| *t == 'S') {
            kept.pop();
            continue;
        }
        kept.push((tag, row));
    }
    let streaming = options.streaming.to_string();
    let name = format!(
        "pg{}-{}-v{}-streaming-{streaming}{}.hex",
        server.major(),
        options.slot.replace('_', "-"),
        options.version,
        if options.binary { "-binary" } else { "" }
    );
    let about = format!(
        "{}: slot {} (two-phase: {}), proto_version {}, streaming {streaming}, binary {}.\n\
         Captured by the live conformance suite (bulk rows after the first five left out).",
        server.version(),
        options.slot,
        options.slot == "two_phase",
        options.version,
        options.binary,
    );
    let payloads = kept.into_iter().map(|(_, row)| hex(&row.data));
    write_hex_file(
        &dir.join(name),
        &about,
        options.version,
        streaming,
        payloads,
    )
}

/// Writes a capture file as its readers expect it: `about` as `#` comment lines, then the
/// `# pgoutput decode --proto-version N --streaming MODE` line they take the session's
/// options from, then one payload per line in hex.
pub fn write_hex_file(
    path: &Path,
    about: &str,
    version: impl Display,
    streaming: impl Display,
    payloads: impl IntoIterator<Item = String>,
) -> Result<(), String> {
    let mut text = String::new();
    for line in about.lines() {
        text.push_str(&format!("# {line}\n"));
    }
    text.push_str(&format!(
        "# pgoutput decode --proto-version {version} --streaming {streaming}\n"
    ));
    for payload in payloads {
        text.push_str(&payload);
        text.push('\n');
    }
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    }
    fs::write(path, text).map_err(|e| e.to_string())
}
