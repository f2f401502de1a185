//! `tail`: stream a replication slot from a live server, like pg_recvlogical for pgoutput.

use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use pgoutput_codec::{
    decode, encode, Ctx, Decoder, Lsn, PgOutputMessage, PgTimestamp, ProtocolVersion,
    ServerMessage, StandbyStatusUpdate,
};

use super::StreamingArg;
use pgoutput_codec::client::{ConnInfo, Connection, CopyEvent};

#[derive(Debug, Args)]
#[command(after_help = "\
Prints one message per line to standard output and reports progress on standard error. The
slot's confirmed position moves to the end of each transaction once it has been printed and
flushed. Stops at --end-lsn, when the server ends the stream, or on Ctrl-C, reporting the last
flushed LSN.

Example:
  pgoutput tail 'host=localhost user=repl dbname=app' --slot app_slot --create-slot \\
      --publication app_pub --proto-version 4 --streaming parallel --messages")]
pub struct TailArgs {
    /// Connection string: `key=value` pairs (host, port, user, password, dbname) or a
    /// postgresql:// URI. PGHOST, PGPORT, PGUSER, PGPASSWORD and PGDATABASE fill in the rest.
    conninfo: Option<String>,
    /// The logical replication slot to stream.
    #[arg(long)]
    slot: String,
    /// Create the slot (pgoutput plugin) before streaming.
    #[arg(long)]
    create_slot: bool,
    /// Publication names, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    publication: Vec<String>,
    /// The pgoutput protocol version to ask for (1 to 4).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4))]
    proto_version: u32,
    /// Streaming of in-progress transactions.
    #[arg(long, value_enum, default_value_t = StreamingArg::Off)]
    streaming: StreamingArg,
    /// Ask for binary column values.
    #[arg(long)]
    binary: bool,
    /// Ask for logical decoding messages (pg_logical_emit_message).
    #[arg(long)]
    messages: bool,
    /// Ask for two-phase commit messages (protocol 3+); with --create-slot, create a
    /// two-phase slot.
    #[arg(long)]
    two_phase: bool,
    /// Start streaming here (default: where the slot stands).
    #[arg(long, value_parser = parse_lsn)]
    start_lsn: Option<Lsn>,
    /// Stop once the server has sent everything up to this position.
    #[arg(long, value_parser = parse_lsn)]
    end_lsn: Option<Lsn>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Json)]
    format: OutputFormat,
    /// Seconds between standby status updates.
    #[arg(long, default_value_t = 10)]
    status_interval: u64,
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OutputFormat {
    /// One JSON object per message (the same form `pgoutput decode` writes).
    Json,
    /// One line per message: WAL position, tag and fields.
    Compact,
}

fn parse_lsn(text: &str) -> Result<Lsn, String> {
    text.parse().map_err(|e| format!("{e}"))
}

/// `name` as a quoted identifier.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `text` as a quoted string literal of the replication grammar (no backslash escapes).
fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

struct Session {
    conn: Connection,
    flushed: Lsn,
    last_status: Instant,
}

impl Session {
    fn send_status(&mut self, reply_requested: bool) -> Result<(), String> {
        let update = StandbyStatusUpdate {
            write_lsn: self.flushed,
            flush_lsn: self.flushed,
            apply_lsn: self.flushed,
            send_time: PgTimestamp::now(),
            reply_requested,
        };
        let payload =
            encode(&update, Ctx::plain(ProtocolVersion::V1)).map_err(|e| e.to_string())?;
        self.conn
            .send_copy_data(&payload)
            .map_err(|e| e.to_string())?;
        self.last_status = Instant::now();
        Ok(())
    }
}

pub fn tail(args: &TailArgs) -> Result<ExitCode, String> {
    let version =
        ProtocolVersion::from_number(args.proto_version).ok_or("invalid protocol version")?;
    let mut decoder = Decoder::new(version, args.streaming.into()).map_err(|e| e.to_string())?;
    let mut info = ConnInfo::parse(args.conninfo.as_deref(), |var| std::env::var(var).ok())
        .map_err(|e| e.to_string())?;
    if std::env::var_os("PGAPPNAME").is_none() {
        info.application_name = "pgoutput tail".into();
    }
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
            .map_err(|e| format!("Ctrl-C handler: {e}"))?;
    }
    let mut conn = Connection::connect(&info).map_err(|e| e.to_string())?;
    if args.create_slot {
        let two_phase = if args.two_phase { " TWO_PHASE" } else { "" };
        let rows = conn
            .simple_query(&format!(
                "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput{two_phase}",
                quote_ident(&args.slot)
            ))
            .map_err(|e| e.to_string())?;
        let point = rows
            .first()
            .and_then(|row| row.get(1).cloned().flatten())
            .unwrap_or_default();
        eprintln!("pgoutput tail: created slot {} at {point}", args.slot);
    }
    let publications: Vec<String> = args.publication.iter().map(|p| quote_ident(p)).collect();
    let mut options = vec![
        format!("proto_version '{}'", args.proto_version),
        format!(
            "publication_names {}",
            quote_literal(&publications.join(","))
        ),
    ];
    match args.streaming {
        StreamingArg::Off => {}
        StreamingArg::On => options.push("streaming 'on'".into()),
        StreamingArg::Parallel => options.push("streaming 'parallel'".into()),
    }
    if args.binary {
        options.push("binary 'true'".into());
    }
    if args.messages {
        options.push("messages 'true'".into());
    }
    if args.two_phase {
        options.push("two_phase 'on'".into());
    }
    let start = args.start_lsn.unwrap_or(Lsn(0));
    conn.start_replication(&format!(
        "START_REPLICATION SLOT {} LOGICAL {start} ({})",
        quote_ident(&args.slot),
        options.join(", ")
    ))
    .map_err(|e| e.to_string())?;
    eprintln!("pgoutput tail: streaming slot {} from {start}", args.slot);

    let envelope = Ctx::plain(ProtocolVersion::V1);
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let mut session = Session {
        conn,
        flushed: Lsn(0),
        last_status: Instant::now(),
    };
    let mut open_transaction = false;
    let interval = Duration::from_secs(args.status_interval.max(1));
    let mut reached_end = false;
    while !stop.load(Ordering::SeqCst) && !reached_end {
        match session
            .conn
            .poll_copy_data(Duration::from_millis(200))
            .map_err(|e| e.to_string())?
        {
            CopyEvent::Data(frame) => match decode::<ServerMessage<'_>>(&frame, envelope)
                .map_err(|e| e.to_string())?
            {
                ServerMessage::XLogData(xlog) => {
                    let message = decoder
                        .decode(&xlog.data)
                        .map_err(|e| format!("at {}: {e}", xlog.wal_start))?;
                    match args.format {
                        OutputFormat::Json => {
                            let json =
                                serde_json::to_string(&message).map_err(|e| e.to_string())?;
                            writeln!(out, "{json}")
                        }
                        OutputFormat::Compact => writeln!(out, "{} {message:?}", xlog.wal_start),
                    }
                    .map_err(|e| format!("standard output: {e}"))?;
                    match &message {
                        PgOutputMessage::Begin(_) | PgOutputMessage::BeginPrepare(_) => {
                            open_transaction = true
                        }
                        _ => {}
                    }
                    if let Some(end) = message.transaction_end_lsn() {
                        open_transaction = false;
                        // Report a transaction as flushed only once it is on standard output.
                        out.flush().map_err(|e| format!("standard output: {e}"))?;
                        session.flushed = session.flushed.max(end);
                    }
                }
                ServerMessage::PrimaryKeepalive(keepalive) => {
                    let idle = !open_transaction && !decoder.in_stream();
                    if let Some(end) = args.end_lsn {
                        reached_end = idle && keepalive.wal_end >= end;
                    }
                    if keepalive.reply_requested {
                        session.send_status(false)?;
                    }
                }
            },
            CopyEvent::Idle => {
                out.flush().map_err(|e| format!("standard output: {e}"))?;
                // Waiting for an end position: ask for a keepalive to learn how far the
                // server is.
                if args.end_lsn.is_some() || session.last_status.elapsed() >= interval {
                    session.send_status(args.end_lsn.is_some())?;
                }
            }
            CopyEvent::End => break,
        }
        if session.last_status.elapsed() >= interval {
            session.send_status(false)?;
        }
    }
    out.flush().map_err(|e| format!("standard output: {e}"))?;
    session.send_status(false)?;
    session.conn.finish_copy().map_err(|e| e.to_string())?;
    let why = if stop.load(Ordering::SeqCst) {
        "interrupted"
    } else if reached_end {
        "reached the end position"
    } else {
        "the server ended the stream"
    };
    eprintln!(
        "pgoutput tail: stopped ({why}); last flushed LSN {}",
        session.flushed
    );
    Ok(ExitCode::SUCCESS)
}
