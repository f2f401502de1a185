//! `tail`: stream a replication slot from a live server, like pg_recvlogical for pgoutput.

mod lines;
mod output;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::{Args, ValueEnum};
use pgoutput_client::{
    parse_identifier_list, quote_identifier, ClientError, ConnInfo, Connection, Consumer,
    ConsumerConfig, Finished, Reconnecting, StreamOptions,
};
use pgoutput_codec::{Decoder, Lsn, ProtocolVersion};

use super::StreamingArg;
use lines::Lines;
use output::Output;

#[derive(Debug, Args)]
#[command(after_help = "\
Prints one message per line and reports progress on standard error. The slot's confirmed
position moves to the end of each transaction once it has been written out (and, with
--file, fsynced), and, while no transaction is open, to the WAL end the server reports, so
that the slot advances while the published tables are idle. Stops exactly at --end-lsn (as
pg_recvlogical --endpos does), when the server ends the stream, on Ctrl-C or SIGTERM, or
quietly when standard output is closed, reporting the last flushed LSN.

A lost connection (server restart, killed walsender, network failure) is reported with what
happened and the last flushed LSN; tail then reconnects after --reconnect-delay seconds and
resumes after the last transaction it wrote, as pg_recvlogical does (--no-loop exits 1
instead). A transaction cut off by the loss is sent again in full: with --file the
unfinished part is cut from the file first, so the file holds each transaction once; on
standard output it stays, a Begin without its Commit.

The connection string takes libpq's keys and environment variables, TLS included
(sslmode, sslrootcert, sslcert, sslkey), the password file (~/.pgpass), connect_timeout,
TCP keepalives (on by default) and client_encoding (SQL_ASCII for a SQL_ASCII database whose
text is not UTF-8).

Publication names follow PostgreSQL's identifier rules: MixPub means mixpub; write
'\"MixPub\"' for a name with capitals.

Examples:
  pgoutput tail 'host=db.example user=repl dbname=app sslmode=verify-full sslrootcert=ca.pem' \\
      --slot app_slot --create-slot --if-not-exists --publication app_pub \\
      --proto-version 4 --streaming parallel --messages --file changes.jsonl
  pgoutput tail 'dbname=app' --slot app_slot --drop-slot")]
pub struct TailArgs {
    /// Connection string: libpq `key=value` pairs or a postgresql:// URI; libpq's
    /// environment variables (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGSSLMODE, …) fill in
    /// the rest.
    conninfo: Option<String>,
    /// The logical replication slot to stream.
    #[arg(long)]
    slot: String,
    /// Create the slot (pgoutput plugin) before streaming.
    #[arg(long)]
    create_slot: bool,
    /// With --create-slot: go on if the slot exists already.
    #[arg(long, requires = "create_slot")]
    if_not_exists: bool,
    /// With --create-slot: a temporary slot, gone when the connection ends (so a lost
    /// connection ends tail instead of reconnecting).
    #[arg(long, requires = "create_slot")]
    temporary: bool,
    /// Drop the slot and exit.
    #[arg(long, conflicts_with_all = ["create_slot", "publication"])]
    drop_slot: bool,
    /// Publication names, comma-separated (identifiers: unquoted ones fold to lower case).
    #[arg(long, value_delimiter = ',', required_unless_present = "drop_slot")]
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
    /// A further pgoutput option, NAME=VALUE (repeatable), such as `-o origin=none`.
    #[arg(short = 'o', long = "option", value_name = "NAME=VALUE", value_parser = parse_option)]
    options: Vec<(String, String)>,
    /// Start streaming here (default: where the slot stands).
    #[arg(long, value_parser = parse_lsn)]
    start_lsn: Option<Lsn>,
    /// Stop once the server has sent everything up to this position.
    #[arg(long, value_parser = parse_lsn)]
    end_lsn: Option<Lsn>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Json)]
    format: OutputFormat,
    /// Add each message's WAL position to its JSON line (`wal_start`, `wal_end`, as the
    /// server's XLogData header gives them), `"enum": true` to an enum's Type line, and a
    /// `keepalive` line where the server's WAL end moved while idle: a recording
    /// `pgoutput serve --script` replays with its positions.
    #[arg(long)]
    wal_positions: bool,
    /// Append to this file instead of standard output (`-` is standard output).
    #[arg(short = 'f', long)]
    file: Option<PathBuf>,
    /// With --file: seconds between fsyncs; the slot is confirmed only up to what is
    /// fsynced. 0 never fsyncs (the slot follows what is written).
    #[arg(long, default_value_t = 10)]
    fsync_interval: u64,
    /// Seconds between standby status updates.
    #[arg(long, default_value_t = 10)]
    status_interval: u64,
    /// Seconds to wait before reconnecting after a lost connection.
    #[arg(long, default_value_t = 5)]
    reconnect_delay: u64,
    /// Exit 1 on a lost connection instead of reconnecting.
    #[arg(short = 'n', long)]
    no_loop: bool,
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

fn parse_option(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or("expected NAME=VALUE, such as origin=none")?;
    Ok((name.trim().to_owned(), value.to_owned()))
}

/// The options tail sets from its own flags, which `-o` must not set again.
const FLAG_OPTIONS: [(&str, &str); 6] = [
    ("proto_version", "--proto-version"),
    ("publication_names", "--publication"),
    ("streaming", "--streaming"),
    ("binary", "--binary"),
    ("messages", "--messages"),
    ("two_phase", "--two-phase"),
];

/// What tail asks the server for, from its flags and `-o` options.
fn stream_options(args: &TailArgs, version: ProtocolVersion) -> Result<StreamOptions, String> {
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
    for (name, value) in &args.options {
        let lower = name.to_lowercase();
        if let Some((_, flag)) = FLAG_OPTIONS.iter().find(|(option, _)| *option == lower) {
            return Err(format!("-o {name}: use {flag}, which tail decodes by"));
        }
        if options
            .other
            .iter()
            .any(|(seen, _)| seen.to_lowercase() == lower)
        {
            return Err(format!("-o {name}: given twice"));
        }
        options.other.push((lower, value.clone()));
    }
    Ok(options)
}

pub fn tail(args: &TailArgs) -> Result<ExitCode, String> {
    let version =
        ProtocolVersion::from_number(args.proto_version).ok_or("invalid protocol version")?;
    // Checked before connecting: a wrong combination is a usage error, not a server one.
    Decoder::new(version, args.streaming.into()).map_err(|e| e.to_string())?;
    let options = stream_options(args, version)?;
    let mut info = ConnInfo::parse(args.conninfo.as_deref(), |var| std::env::var(var).ok())
        .map_err(|e| e.to_string())?;
    if std::env::var_os("PGAPPNAME").is_none() {
        info.application_name = "pgoutput tail".into();
    }
    let stop = super::stop_signal()?;
    let mut conn = Connection::connect(&info).map_err(|e| e.to_string())?;
    if args.drop_slot {
        conn.simple_query(&format!(
            "DROP_REPLICATION_SLOT {}",
            quote_identifier(&args.slot)
        ))
        .map_err(|e| e.to_string())?;
        eprintln!("pgoutput tail: dropped slot {}", args.slot);
        return Ok(ExitCode::SUCCESS);
    }
    if args.create_slot {
        create_slot(args, &mut conn)?;
    }
    let lines = match args.format {
        OutputFormat::Json if args.wal_positions => Lines::recording(&mut conn),
        OutputFormat::Json => Lines::Json,
        OutputFormat::Compact => Lines::Compact,
    };
    let mut output = Output::open(args.file.as_deref(), args.fsync_interval)?;
    let mut config = ConsumerConfig::new(&args.slot, options)
        .start_lsn(args.start_lsn.unwrap_or(Lsn(0)))
        .status_interval(Duration::from_secs(args.status_interval.max(1)));
    if let Some(end) = args.end_lsn {
        config = config.end_lsn(end);
    }
    // A temporary slot is gone with its connection: nothing to reconnect to.
    if !args.no_loop && !args.temporary {
        config = config
            .reconnect(Duration::from_secs(args.reconnect_delay))
            .on_reconnect(report_reconnecting);
    }
    let outcome = match start(conn, &info, &config, args, &stop) {
        Ok(Some(mut consumer)) => follow(&mut consumer, args, &lines, &mut output, &stop),
        Ok(None) => Ok(Stopped::Interrupted),
        Err(err) => Err(Failure::from(err)),
    };
    // However the stream ended, the file does not end inside a transaction.
    let cut = output.cut_unfinished().map_err(|e| e.to_string())?;
    if cut {
        eprintln!("pgoutput tail: removed the unfinished transaction from the file");
    }
    let confirmed = output.confirmable();
    match outcome {
        Ok(why) => {
            match why {
                // `| head -1`: the reader has what it wanted; say nothing.
                Stopped::OutputClosed => {}
                why => eprintln!(
                    "pgoutput tail: stopped ({}); last flushed LSN {confirmed}",
                    why.describe()
                ),
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(Failure::Stream(err)) if err.is_transient() => {
            let note = if args.temporary {
                " (a temporary slot is gone with its connection)"
            } else {
                ""
            };
            eprintln!(
                "pgoutput tail: {}; last flushed LSN {confirmed}{note}",
                describe_loss(&err)
            );
            Ok(ExitCode::from(1))
        }
        Err(Failure::Stream(err)) => {
            eprintln!("pgoutput tail: {err}; last flushed LSN {confirmed}");
            Ok(ExitCode::from(1))
        }
        Err(Failure::Output(err)) => {
            eprintln!("pgoutput tail: {err}; last flushed LSN {confirmed}");
            Ok(ExitCode::from(1))
        }
    }
}

/// Why following the stream failed.
#[derive(Debug)]
enum Failure {
    /// The connection or the stream: lost, refused, or a message that does not decode.
    Stream(ClientError),
    /// Writing the output.
    Output(String),
}

impl From<ClientError> for Failure {
    fn from(err: ClientError) -> Self {
        Failure::Stream(err)
    }
}

impl From<String> for Failure {
    fn from(err: String) -> Self {
        Failure::Output(err)
    }
}

/// START_REPLICATION, tried again after `--reconnect-delay` as long as it fails in a way
/// that passes (the slot still held by a walsender that has not noticed its old client is
/// gone, the server starting): `None` when interrupted meanwhile.
fn start(
    mut conn: Connection,
    info: &ConnInfo,
    config: &ConsumerConfig,
    args: &TailArgs,
    stop: &AtomicBool,
) -> Result<Option<Consumer>, ClientError> {
    let retries = !args.no_loop && !args.temporary;
    let delay = Duration::from_secs(args.reconnect_delay);
    // Waits out the delay; `false` when interrupted.
    let wait = || {
        let until = std::time::Instant::now() + delay;
        while std::time::Instant::now() < until {
            if stop.load(Ordering::SeqCst) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        true
    };
    loop {
        let mut err = match Consumer::start(conn, Some(info.clone()), config.clone()) {
            Ok(consumer) => return Ok(Some(consumer)),
            Err(err) if retries && err.is_transient() => err,
            Err(err) => return Err(err),
        };
        conn = loop {
            eprintln!(
                "pgoutput tail: {}; retrying in {} s",
                describe_loss(&err),
                args.reconnect_delay
            );
            if !wait() {
                return Ok(None);
            }
            match Connection::connect(info) {
                Ok(new) => break new,
                Err(again) if again.is_transient() => err = again,
                Err(again) => return Err(again),
            }
        };
    }
}

/// Says how reconnecting goes, on standard error.
fn report_reconnecting(note: &Reconnecting<'_>) {
    match note {
        Reconnecting::Lost {
            error,
            confirmed,
            delay,
        } => {
            let why = error.map_or_else(|| "the server ended the stream".into(), describe_loss);
            eprintln!(
                "pgoutput tail: {why}; last flushed LSN {confirmed}; reconnecting in {} s",
                delay.as_secs()
            );
        }
        Reconnecting::Retrying { error, delay } => eprintln!(
            "pgoutput tail: {}; retrying in {} s",
            describe_loss(error),
            delay.as_secs()
        ),
        Reconnecting::Resumed { .. } => eprintln!("pgoutput tail: reconnected"),
    }
}

fn create_slot(args: &TailArgs, conn: &mut Connection) -> Result<(), String> {
    let temporary = if args.temporary { " TEMPORARY" } else { "" };
    let two_phase = if args.two_phase { " TWO_PHASE" } else { "" };
    let created = conn.simple_query(&format!(
        "CREATE_REPLICATION_SLOT {}{temporary} LOGICAL pgoutput{two_phase}",
        quote_identifier(&args.slot)
    ));
    match created {
        Ok(rows) => {
            let point = rows
                .first()
                .and_then(|row| row.get(1).cloned().flatten())
                .unwrap_or_default();
            eprintln!("pgoutput tail: created slot {} at {point}", args.slot);
        }
        // duplicate_object: the slot is there already, as asked.
        Err(ClientError::Server(e)) if args.if_not_exists && e.code == "42710" => {
            eprintln!("pgoutput tail: slot {} exists already", args.slot);
        }
        Err(e) => return Err(e.to_string()),
    }
    Ok(())
}

/// What happened to the connection, in words a user can act on.
fn describe_loss(err: &ClientError) -> String {
    match err {
        ClientError::Closed => "the server closed the connection".into(),
        ClientError::Io(e) => format!("the connection was lost: {e}"),
        ClientError::Server(e) if e.code.starts_with("57P") => {
            format!("the server shut down: {}", e.message)
        }
        other => other.to_string(),
    }
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

/// Nothing is open and the server has sent everything before `lsn` (its keepalives say
/// so): with `--wal-positions` a keepalive line records where the WAL end moved, so that
/// a replay reports it too. `Ok(false)` when standard output has been closed.
fn idle_at(output: &mut Output, lines: &Lines, lsn: Lsn) -> Result<bool, String> {
    if let Some(line) = lines.keepalive(lsn) {
        if !output.write_line(&line)? {
            return Ok(false);
        }
    }
    output.idle_at(lsn)
}

/// The stream, written out. The slot is confirmed up to what is safely on the output:
/// the end of each transaction once it is written (and, with --file, fsynced), and while
/// no transaction is open, the WAL end the server reports (so the slot advances while the
/// published tables are idle). The consumer stops exactly where pg_recvlogical --endpos
/// does.
fn follow(
    consumer: &mut Consumer,
    args: &TailArgs,
    lines: &Lines,
    output: &mut Output,
    stop: &AtomicBool,
) -> Result<Stopped, Failure> {
    let why = stream(consumer, args, lines, output, stop)?;
    // Whatever stopped us, the server learns what is safely out, then the stream ends.
    output.sync()?;
    consumer.confirm(output.confirmable());
    Ok(why)
}

fn stream(
    consumer: &mut Consumer,
    args: &TailArgs,
    lines: &Lines,
    output: &mut Output,
    stop: &AtomicBool,
) -> Result<Stopped, Failure> {
    let mut announced = false;
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(Stopped::Interrupted);
        }
        let event = consumer.next_within(Duration::from_millis(200))?;
        let Some(event) = event else {
            match consumer.finished() {
                Some(Finished::EndPosition) => {
                    // The end came with the server idle at or past it: that is out too.
                    if consumer.idle() && consumer.delivered() > output.written() {
                        idle_at(output, lines, consumer.delivered())?;
                    }
                    return Ok(Stopped::EndPosition);
                }
                Some(Finished::ServerEnded) if args.temporary => {
                    return Err(ClientError::Closed.into())
                }
                Some(Finished::ServerEnded) => return Ok(Stopped::ServerEnded),
                Some(Finished::Closed) => return Err(ClientError::Closed.into()),
                None => {}
            }
            if !output.flush()? {
                return Ok(Stopped::OutputClosed);
            }
            if !announced {
                if let Some(end) = consumer.server_wal_end() {
                    announced = true;
                    eprintln!("pgoutput tail: streaming slot {} from {end}", args.slot);
                }
            }
            // Nothing is open and the server has sent everything before its WAL end.
            if consumer.idle()
                && consumer.delivered() > output.written()
                && !idle_at(output, lines, consumer.delivered())?
            {
                return Ok(Stopped::OutputClosed);
            }
            output.sync_if_due()?;
            consumer.confirm(output.confirmable());
            continue;
        };
        if !announced {
            announced = true;
            eprintln!(
                "pgoutput tail: streaming slot {} from {}",
                args.slot, event.wal_start
            );
        }
        // A new connection sends an unfinished transaction again in full: cut what the
        // file holds of it first.
        if event.resumed()
            && output
                .cut_unfinished()
                .map_err(|e| format!("output: {e}"))?
        {
            eprintln!(
                "pgoutput tail: removed the unfinished transaction from the file; it is sent again"
            );
        }
        let line = lines.message(&event)?;
        if !output.write_line(&line)? {
            return Ok(Stopped::OutputClosed);
        }
        if let Some(end) = event.confirmable_lsn() {
            // A transaction counts as written only once it is out; a place to cut the
            // file back to only if no streamed transaction is open either.
            let end = args.end_lsn.map_or(end, |stop_at| end.min(stop_at));
            if !output.finish_transaction(end, consumer.idle())? {
                return Ok(Stopped::OutputClosed);
            }
        }
        output.sync_if_due()?;
        consumer.confirm(output.confirmable());
    }
}
