//! `tail`: stream a replication slot from a live server, like pg_recvlogical for pgoutput.

use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use pgoutput_codec::{
    decode, encode, Ctx, Decoder, Lsn, PgOutputMessage, PgTimestamp, ProtocolVersion,
    ServerMessage, StandbyStatusUpdate, Xid,
};

use super::StreamingArg;
use pgoutput_codec::client::{
    parse_identifier_list, quote_identifier, ClientError, ConnInfo, Connection, CopyEvent,
    StreamOptions,
};

#[derive(Debug, Args)]
#[command(after_help = "\
Prints one message per line to standard output and reports progress on standard error. The
slot's confirmed position moves to the end of each transaction once it has been printed and
flushed, and, while no transaction is open, to the WAL end the server reports, so that the
slot advances while the published tables are idle. Stops exactly at --end-lsn (as
pg_recvlogical --endpos does), when the server ends the stream, on Ctrl-C or SIGTERM, or
quietly when standard output is closed, reporting the last flushed LSN. A lost connection
is reported with what happened and the last flushed LSN, and exits 1.

Publication names follow PostgreSQL's identifier rules: MixPub means mixpub; write
'\"MixPub\"' for a name with capitals.

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
    /// Publication names, comma-separated (identifiers: unquoted ones fold to lower case).
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
        // SIGINT and SIGTERM (which systemd and container runtimes send) alike.
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
            .map_err(|e| format!("signal handler: {e}"))?;
    }
    let mut conn = Connection::connect(&info).map_err(|e| e.to_string())?;
    if args.create_slot {
        let two_phase = if args.two_phase { " TWO_PHASE" } else { "" };
        let rows = conn
            .simple_query(&format!(
                "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput{two_phase}",
                quote_identifier(&args.slot)
            ))
            .map_err(|e| e.to_string())?;
        let point = rows
            .first()
            .and_then(|row| row.get(1).cloned().flatten())
            .unwrap_or_default();
        eprintln!("pgoutput tail: created slot {} at {point}", args.slot);
    }
    // Publication names follow PostgreSQL's identifier rules, as with pg_recvlogical's
    // `-o publication_names=`: unquoted names fold to lower case, "Quoted" ones keep theirs.
    let publications = parse_identifier_list(&args.publication.join(","))
        .ok_or("--publication: invalid list of publication names")?;
    let mut options = StreamOptions::new(version, &[])
        .streaming(args.streaming.into())
        .binary(args.binary)
        .messages(args.messages)
        .two_phase(args.two_phase);
    options.publication_names = publications;
    let start = args.start_lsn.unwrap_or(Lsn(0));
    conn.start_replication(&options.start_replication(&args.slot, start))
        .map_err(|e| e.to_string())?;

    let mut session = Session {
        conn,
        flushed: Lsn(0),
        last_status: Instant::now(),
    };
    let outcome = stream(args, &mut session, &mut decoder, &stop);
    let why = match outcome {
        Ok(why) => why,
        Err(lost) => {
            eprintln!(
                "pgoutput tail: {lost}; last flushed LSN {}",
                session.flushed
            );
            return Ok(ExitCode::from(1));
        }
    };
    // Whatever stopped us, the server learns what is safely out, then the stream ends.
    let finish = session
        .send_status(false)
        .and_then(|()| session.conn.finish_copy().map_err(|e| e.to_string()));
    if let Err(err) = finish {
        eprintln!("pgoutput tail: {err}; last flushed LSN {}", session.flushed);
        return Ok(ExitCode::from(1));
    }
    match why {
        // `| head -1`: the reader has what it wanted; say nothing.
        Stopped::OutputClosed => {}
        why => eprintln!(
            "pgoutput tail: stopped ({}); last flushed LSN {}",
            why.describe(),
            session.flushed
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// Why streaming stopped, when it stopped as asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopped {
    /// Ctrl-C or SIGTERM.
    Interrupted,
    /// `--end-lsn` was reached.
    EndPosition,
    /// The server ended the stream (CopyDone).
    ServerEnded,
    /// Standard output was closed (`| head`).
    OutputClosed,
}

impl Stopped {
    fn describe(self) -> &'static str {
        match self {
            Stopped::Interrupted => "interrupted",
            Stopped::EndPosition => "reached the end position",
            Stopped::ServerEnded => "the server ended the stream",
            Stopped::OutputClosed => "standard output closed",
        }
    }
}

/// What happened to the connection, in words a user can act on.
fn lost(err: &ClientError) -> String {
    match err {
        ClientError::Closed => "the server closed the connection".into(),
        ClientError::Io(e) => format!("the connection was lost: {e}"),
        ClientError::Server(e) if e.code.starts_with("57P") => {
            format!("the server shut down: {}", e.message)
        }
        other => other.to_string(),
    }
}

/// Writes one line; `Ok(false)` when standard output has been closed.
fn write_line(out: &mut impl Write, line: std::fmt::Arguments<'_>) -> Result<bool, String> {
    match out.write_fmt(line).and_then(|()| out.write_all(b"\n")) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(format!("standard output: {e}")),
    }
}

/// Flushes standard output; `Ok(false)` when it has been closed.
fn flush(out: &mut impl Write) -> Result<bool, String> {
    match out.flush() {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(format!("standard output: {e}")),
    }
}

/// The copy-both loop. The slot's confirmed position moves to the end of each transaction
/// once it is on standard output, and, when no transaction is open, to the WAL end the
/// server reports in its keepalives (so the slot advances while the published tables are
/// idle), but never past `--end-lsn`. Stops exactly where pg_recvlogical --endpos does: a
/// record at the end position is printed, one beyond it is not.
fn stream(
    args: &TailArgs,
    session: &mut Session,
    decoder: &mut Decoder,
    stop: &AtomicBool,
) -> Result<Stopped, String> {
    let envelope = Ctx::plain(ProtocolVersion::V1);
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let interval = Duration::from_secs(args.status_interval.max(1));
    let cap = |lsn: Lsn| args.end_lsn.map_or(lsn, |end| lsn.min(end));
    let mut announced = false;
    let mut open_transaction = false;
    // Streamed transactions with blocks out and no Stream Commit/Abort/Prepare yet.
    let mut open_streams: Vec<Xid> = Vec::new();
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(Stopped::Interrupted);
        }
        let event = session
            .conn
            .poll_copy_data(Duration::from_millis(200))
            .map_err(|e| lost(&e))?;
        match event {
            CopyEvent::Data(frame) => {
                match decode::<ServerMessage<'_>>(&frame, envelope).map_err(|e| e.to_string())? {
                    ServerMessage::XLogData(xlog) => {
                        if let Some(end) = args.end_lsn {
                            // Relation and Type frames carry 0/0 and belong to what follows.
                            if xlog.wal_start.is_valid() && xlog.wal_start > end {
                                return Ok(Stopped::EndPosition);
                            }
                        }
                        let message = decoder
                            .decode(&xlog.data)
                            .map_err(|e| format!("at {}: {e}", xlog.wal_start))?;
                        let written = match args.format {
                            OutputFormat::Json => {
                                let json =
                                    serde_json::to_string(&message).map_err(|e| e.to_string())?;
                                write_line(&mut out, format_args!("{json}"))?
                            }
                            OutputFormat::Compact => write_line(
                                &mut out,
                                format_args!("{} {message:?}", xlog.wal_start),
                            )?,
                        };
                        if !written {
                            return Ok(Stopped::OutputClosed);
                        }
                        match &message {
                            PgOutputMessage::Begin(_) | PgOutputMessage::BeginPrepare(_) => {
                                open_transaction = true
                            }
                            PgOutputMessage::StreamStart(start)
                                if !open_streams.contains(&start.xid) =>
                            {
                                open_streams.push(start.xid)
                            }
                            PgOutputMessage::StreamAbort(abort) if abort.is_top_level() => {
                                open_streams.retain(|x| *x != abort.xid)
                            }
                            PgOutputMessage::StreamCommit(commit) => {
                                open_streams.retain(|x| *x != commit.xid)
                            }
                            PgOutputMessage::StreamPrepare(prepare) => {
                                open_streams.retain(|x| *x != prepare.xid)
                            }
                            _ => {}
                        }
                        if let Some(end) = message.transaction_end_lsn() {
                            open_transaction = false;
                            // Report a transaction as flushed only once it is on standard
                            // output.
                            if !flush(&mut out)? {
                                return Ok(Stopped::OutputClosed);
                            }
                            session.flushed = session.flushed.max(cap(end));
                        }
                        if args.end_lsn == Some(xlog.wal_start) {
                            if !flush(&mut out)? {
                                return Ok(Stopped::OutputClosed);
                            }
                            return Ok(Stopped::EndPosition);
                        }
                    }
                    ServerMessage::PrimaryKeepalive(keepalive) => {
                        if !announced {
                            announced = true;
                            eprintln!(
                                "pgoutput tail: streaming slot {} from {}",
                                args.slot, keepalive.wal_end
                            );
                        }
                        let idle = !open_transaction && open_streams.is_empty();
                        if idle {
                            if !flush(&mut out)? {
                                return Ok(Stopped::OutputClosed);
                            }
                            session.flushed = session.flushed.max(cap(keepalive.wal_end));
                        }
                        if let Some(end) = args.end_lsn {
                            if idle && keepalive.wal_end >= end {
                                return Ok(Stopped::EndPosition);
                            }
                        }
                        if keepalive.reply_requested {
                            session.send_status(false)?;
                        }
                    }
                }
            }
            CopyEvent::Idle => {
                if !flush(&mut out)? {
                    return Ok(Stopped::OutputClosed);
                }
                // Waiting for an end position: ask for a keepalive to learn how far the
                // server is.
                if args.end_lsn.is_some() || session.last_status.elapsed() >= interval {
                    session.send_status(args.end_lsn.is_some())?;
                }
            }
            CopyEvent::End => {
                flush(&mut out)?;
                return Ok(Stopped::ServerEnded);
            }
        }
        if session.last_status.elapsed() >= interval {
            session.send_status(false)?;
        }
    }
}
