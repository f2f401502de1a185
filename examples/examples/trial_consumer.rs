//! A consumer for `pgoutput trial`, on the crate's own `Consumer` with whole
//! transactions: it appends each transaction's row changes to the JSON-lines sink the
//! trial reads, makes them durable, and only then confirms the transaction's end.
//!
//! Exact across a kill: each line carries its transaction's end position, the last line
//! of a transaction says `"commit": true`, and at start the sink is cut back to the end of
//! its last whole transaction, whose position is where applying resumes (what comes again
//! up to it is skipped).
//!
//! ```text
//! pgoutput trial -- cargo run -q -p pgoutput-examples --example trial_consumer
//! ```

use std::error::Error;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::time::Duration;

use pgoutput_client::{ConnInfo, Consumer, ConsumerConfig, Event, Row, StreamOptions};
use pgoutput_codec::{ColumnValue, Lsn, PgOutputMessage, ProtocolVersion};
use serde_json::{json, Map, Value};

fn var(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set: run me from `pgoutput trial`"))
}

fn main() -> Result<(), Box<dyn Error>> {
    let sink_path = var("PGOUTPUT_TRIAL_SINK")?;
    let (mut sink, mut applied) = recover(&sink_path)?;
    let info = ConnInfo::parse(Some(&var("PGOUTPUT_TRIAL_DSN")?), |_| None)?;
    let publication = var("PGOUTPUT_TRIAL_PUBLICATION")?;
    let options = StreamOptions::new(ProtocolVersion::V1, &[publication.as_str()]);
    let config = ConsumerConfig::new(&var("PGOUTPUT_TRIAL_SLOT")?, options)
        .reconnect(Duration::from_millis(100))
        .status_interval(Duration::from_secs(1))
        // A connection silent for 5 s (a reply asked for at 2.5 s) is given up: the
        // default is wal_receiver_timeout's 60 s, which the trial's silent-stall
        // scenario also waits out.
        .receive_timeout(Some(Duration::from_secs(5)));
    // As a service does: a server not up yet (or a proxy between scenarios of a trial
    // attached to this consumer) is tried again until it is.
    let mut consumer = loop {
        match Consumer::connect(&info, config.clone()) {
            Ok(consumer) => break consumer,
            Err(err) if err.is_transient() => std::thread::sleep(Duration::from_millis(100)),
            Err(err) => return Err(err.into()),
        }
    };
    while let Some(mut transaction) = consumer.next_transaction()? {
        let Some(end) = transaction.end_lsn() else {
            continue;
        };
        let mut lines = Vec::new();
        while let Some(event) = transaction.next_event()? {
            lines.extend(lines_of(&event));
        }
        // Sent again (a crash, a restart before the confirmation reached the server):
        // applied already.
        if end > applied && !lines.is_empty() {
            let mut text = String::new();
            let last = lines.len() - 1;
            for (i, mut line) in lines.into_iter().enumerate() {
                line.insert("lsn".into(), json!(end.to_string()));
                if i == last {
                    line.insert("commit".into(), json!(true));
                }
                text.push_str(&Value::Object(line).to_string());
                text.push('\n');
            }
            sink.write_all(text.as_bytes())?;
            sink.sync_data()?;
            applied = end;
        }
        consumer.confirm(end);
    }
    Ok(())
}

/// The sink cut back to its last whole transaction, and that transaction's end.
fn recover(path: &str) -> Result<(File, Lsn), Box<dyn Error>> {
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let (mut keep, mut applied, mut offset) = (0, Lsn(0), 0);
    for line in text.split_inclusive('\n') {
        offset += line.len();
        let Ok(value) = serde_json::from_str::<Value>(line) else {
            break;
        };
        if value["commit"] == json!(true) && line.ends_with('\n') {
            keep = offset;
            applied = value["lsn"].as_str().unwrap_or("0/0").parse()?;
        }
    }
    file.set_len(keep as u64)?;
    file.seek(SeekFrom::End(0))?;
    Ok((file, applied))
}

/// The sink's lines for one event: a row change, or a line per table truncated.
fn lines_of(event: &Event<'_>) -> Vec<Map<String, Value>> {
    let line = |table: &str, op: &str| {
        let mut line = Map::new();
        line.insert("table".into(), json!(table));
        line.insert("op".into(), json!(op));
        line
    };
    let (op, row) = match &event.message {
        PgOutputMessage::Truncate(_) => {
            return event
                .truncated()
                .map(|relation| {
                    let mut line = line(&relation.name, "truncate");
                    line.insert("key".into(), json!({}));
                    line
                })
                .collect();
        }
        PgOutputMessage::Insert(_) => ("insert", event.new_row()),
        PgOutputMessage::Update(_) => ("update", event.new_row()),
        PgOutputMessage::Delete(_) => ("delete", event.old_row()),
        _ => return Vec::new(),
    };
    let (Some(relation), Some(row)) = (event.relation(), row) else {
        return Vec::new();
    };
    let mut out = line(&relation.name, op);
    let key: Map<String, Value> = row
        .key()
        .filter_map(|column| Some((column.name().to_owned(), text(column.raw())?)))
        .collect();
    out.insert("key".into(), Value::Object(key));
    if op != "delete" {
        out.insert("values".into(), Value::Object(values(&row)));
    }
    vec![out]
}

/// The values written: an unchanged TOASTed value is left out (the row keeps it).
fn values(row: &Row<'_>) -> Map<String, Value> {
    row.iter()
        .filter_map(|column| Some((column.name().to_owned(), text(column.raw())?)))
        .collect()
}

fn text(value: &ColumnValue<'_>) -> Option<Value> {
    match value {
        ColumnValue::Text(bytes) => Some(json!(String::from_utf8_lossy(bytes))),
        ColumnValue::Null => Some(Value::Null),
        _ => None,
    }
}
