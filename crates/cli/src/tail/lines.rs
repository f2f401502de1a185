//! How tail writes what it receives: one JSON line per message (`--format json`), with
//! `--wal-positions` a recording `pgoutput serve --script` replays exactly (each frame's
//! positions in front, enums' Type lines marked, a keepalive line where the server's WAL
//! end moved while idle), or one compact line per message.

use std::collections::HashSet;

use pgoutput_client::{Connection, Event};
use pgoutput_codec::{Lsn, PgOutputMessage};

/// The line format, chosen once from the arguments.
pub enum Lines {
    /// The message's JSON, as `pgoutput decode` prints it.
    Json,
    /// `--wal-positions`: what a replay needs, with the database's enum types.
    Recording { enums: HashSet<u32> },
    /// `--format compact`.
    Compact,
}

/// A message's JSON line with its WAL position in front, and on the Type message of an
/// enum `"enum": true` (a replay sends its values in the other form as they are: a label
/// is both).
#[derive(serde::Serialize)]
struct Positioned<'m, 'a> {
    wal_start: Lsn,
    wal_end: Lsn,
    #[serde(flatten)]
    message: &'m PgOutputMessage<'a>,
    #[serde(rename = "enum", skip_serializing_if = "std::ops::Not::not")]
    is_enum: bool,
}

impl Lines {
    /// A recording, asking the server (before streaming) which types are enums; a server
    /// that does not answer SQL on a replication connection gives none.
    pub fn recording(conn: &mut Connection) -> Lines {
        let enums = conn
            .simple_query("SELECT oid FROM pg_catalog.pg_type WHERE typtype = 'e'")
            .map(|rows| {
                rows.iter()
                    .filter_map(|row| row.first()?.as_deref()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        Lines::Recording { enums }
    }

    /// The line for one received message.
    pub fn message(&self, event: &Event<'_>) -> Result<String, String> {
        match self {
            Lines::Json => serde_json::to_string(&event.message),
            Lines::Recording { enums } => serde_json::to_string(&Positioned {
                wal_start: event.wal_start,
                wal_end: event.wal_end,
                message: &event.message,
                is_enum: matches!(&event.message, PgOutputMessage::Type(t) if enums.contains(&t.type_oid.0)),
            }),
            Lines::Compact => Ok(format!("{} {:?}", event.wal_start, event.message)),
        }
        .map_err(|e| e.to_string())
    }

    /// The line, in a recording, for a keepalive that moved the WAL end to `lsn` while no
    /// transaction was open.
    pub fn keepalive(&self, lsn: Lsn) -> Option<String> {
        match self {
            Lines::Recording { .. } => {
                Some(serde_json::json!({"wal_end": lsn, "type": "keepalive"}).to_string())
            }
            _ => None,
        }
    }
}
