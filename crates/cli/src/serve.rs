//! `serve`: run the test walsender from the command line.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use pgoutput_codec::{ColumnValue, TruncateOptions};
use pgoutput_harness::faults::Fault;
use pgoutput_harness::judge::Probe;
use pgoutput_harness::server::{Auth, Event, Publication, Script, Table, TestServer, Transaction};
use pgoutput_harness::Control;
use serde::Deserialize;

/// The help text with each fault action's line where it says `@ACTIONS@` (each action's
/// file in the harness has its line).
pub(crate) fn with_actions(help: &str) -> String {
    let actions: Vec<String> = pgoutput_harness::faults::Action::help()
        .lines()
        .map(|line| format!("    {line}"))
        .collect();
    help.replace("@ACTIONS@", &actions.join("\n"))
}

#[derive(Debug, Args)]
#[command(
    after_help = with_actions(concat!(r#"Serves a pgoutput stream to replication clients (pg_recvlogical, psycopg2, a PostgreSQL
subscriber, pgoutput tail). Without --script it serves a demo: publication `demo` in database
`postgres` with tables public.accounts and public.events, inserts, updates, deletes, a
truncate, a streamed transaction with a subtransaction abort, a two-phase transaction, then a
new transaction every second. Logs each client, its options and confirmed positions.

--config names a JSON file with any of these keys (options given on the command line win):
  {"server_version": "15.20", "database": "app", "system_identifier": 7400000000000000001,
   "start_lsn": "0/1000000", "keepalive_interval_ms": 10000,
   "wal_sender_timeout": "60s", "authentication_timeout": "1min", "max_wal_senders": 10,
   "max_replication_slots": 10,
   "auth": {"method": "scram", "user": "rep", "password": "pw"},
   "publications": [{"name": "p", "tables": [{"oid": 16385, "schema": "public",
     "name": "t", "replica_identity": "default",
     "columns": [{"name": "id", "type_oid": 23, "key": true}, {"name": "v", "type_oid": 25}],
     "rows": [["1", "a"], ["2", null]]}]}]}
  auth methods: trust; password (user, password); scram (user, and password or verifier).
  A publication with "all_tables": true publishes every table, the script's included;
  "tables" (same form as a publication's) declares tables no publication has.
  Timeouts are PostgreSQL's settings, with its units (ms, s, min, h, d); a bare number
  is milliseconds for wal_sender_timeout and seconds for authentication_timeout, as in
  postgresql.conf. wal_sender_timeout 0 turns it off. keepalive_interval_ms is ours: how
  long a streaming connection may go without a message before it gets a keepalive.
  "checkpoint_interval" (default "5min") is how often slots' positions are persisted.

Fault rules (--fault JSON, repeatable; "faults": [...] in --config; POST /faults):
  {"when": {...}, "then": {...}, "slot": "s", "application_name": "app", "connection": 2,
   "times": 1}   (scope keys optional; times 0 fires every time; counts start at 1)
  when:
    {"on": "message", "n": 5}                       after the 5th message sent
    {"on": "message", "n": 3, "kind": "insert", "before": true}   before the 3rd Insert
    {"on": "message", "n": 4, "byte": 7}            after 7 bytes of its CopyData frame
    {"on": "commit", "transaction": 2}              after transaction 2's end
    {"on": "change", "transaction": 5, "after": 3}  inside transaction 5, after 3 changes
    {"on": "stream_block", "transaction": 1, "block": 2}   inside its 2nd stream block
    {"on": "time", "ms": 500}                       500 ms after START_REPLICATION
    {"on": "flush", "lsn": "0/1000360"}             when the client confirms 0/1000360
    {"on": "connect", "attempt": 3}                 on the 3rd connection accepted
  then:
@ACTIONS@

Control API (--control 127.0.0.1:PORT; loopback only unless --control-remote), JSON:
  POST /events (JSON lines, as --script)   GET|POST|DELETE /faults
  GET /   the endpoints   GET /slots (positions, the WAL end, what was sent)
  GET /clients (commands, status updates, messages sent, reply delays, how each ended)
  GET /findings   GET /facts   GET|POST|DELETE /probe   (the judge: see below)
  POST /wait {"slot": "s", "lsn": "0/1000360", "timeout_ms": 5000}   (408 on timeout;
      without "lsn", the WAL end)
  POST /checkpoint   POST /crash   POST /shutdown (fast shutdown; serve exits after)
  POST /slots/NAME/invalidate   POST /slots/NAME/hold {"ms": 2000}   DELETE /slots/NAME
  e.g. curl -X POST localhost:PORT/faults -d '{"when":{"on":"commit","transaction":1},
       "then":{"do":"reset"}}'

Example:
  pgoutput serve --listen 127.0.0.1:5433 &
  pg_recvlogical -d 'host=127.0.0.1 port=5433 user=me dbname=postgres' --slot s \
      --create-slot --plugin pgoutput
  pg_recvlogical -d 'host=127.0.0.1 port=5433 user=me dbname=postgres' --slot s --start \
      -o proto_version=1 -o publication_names=demo -f -"#, judge_help!()))
)]
pub struct ServeArgs {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:5433")]
    listen: SocketAddr,
    /// A script: JSON lines as `pgoutput decode` and `pgoutput tail` print them.
    #[arg(long)]
    script: Option<PathBuf>,
    /// A JSON configuration file (see below).
    #[arg(long)]
    config: Option<PathBuf>,
    /// With --script and no configured publication: the name of a FOR ALL TABLES
    /// publication.
    #[arg(long, default_value = "demo")]
    publication: String,
    /// The server_version to announce, which decides what clients ask for [default: 18.6].
    #[arg(long)]
    server_version: Option<String>,
    /// Require this user and password (SCRAM-SHA-256) instead of trusting everyone; the
    /// password comes from --password, --password-file or PGOUTPUT_SERVE_PASSWORD.
    #[arg(long)]
    user: Option<String>,
    /// The password for --user (visible to `ps`: prefer --password-file or the
    /// environment variable PGOUTPUT_SERVE_PASSWORD).
    #[arg(long, requires = "user", conflicts_with = "password_file")]
    password: Option<String>,
    /// Read the password for --user from this file's first line.
    #[arg(long, value_name = "FILE", requires = "user")]
    password_file: Option<PathBuf>,
    /// PostgreSQL's wal_sender_timeout: a streaming client silent this long is
    /// disconnected (`60s`, `500ms`; 0 turns it off) [default: 60s].
    #[arg(long, value_name = "TIME")]
    wal_sender_timeout: Option<String>,
    /// PostgreSQL's authentication_timeout: the time allowed for the start-up packet,
    /// then for authentication [default: 1min].
    #[arg(long, value_name = "TIME")]
    authentication_timeout: Option<String>,
    /// PostgreSQL's max_wal_senders: replication connections open at once; one more
    /// gets FATAL 53300 [default: 10].
    #[arg(long, value_name = "N")]
    max_wal_senders: Option<usize>,
    /// PostgreSQL's max_replication_slots: slots that may exist at once; one more
    /// gets ERROR 53400 [default: 10].
    #[arg(long, value_name = "N")]
    max_replication_slots: Option<usize>,
    /// PostgreSQL's checkpoint_timeout: how often slots' positions are persisted (a
    /// crash takes each slot back to its last persisted position) [default: 5min].
    #[arg(long, value_name = "TIME")]
    checkpoint_interval: Option<String>,
    /// A fault rule, as JSON (repeatable; see below).
    #[arg(long = "fault", value_name = "JSON")]
    faults: Vec<String>,
    /// Arm the judge's probe: hold one transaction in N after its first change and ask
    /// for a reply (see below).
    #[arg(long, value_name = "N")]
    probe: Option<u64>,
    /// Serve the HTTP/JSON control API here (see below).
    #[arg(long, value_name = "ADDR")]
    control: Option<SocketAddr>,
    /// Let --control listen on an address that is not loopback.
    #[arg(long, requires = "control")]
    control_remote: bool,
}

/// The `--config` file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    server_version: Option<String>,
    database: Option<String>,
    system_identifier: Option<u64>,
    start_lsn: Option<String>,
    keepalive_interval_ms: Option<u64>,
    wal_sender_timeout: Option<Setting>,
    authentication_timeout: Option<Setting>,
    max_wal_senders: Option<usize>,
    max_replication_slots: Option<usize>,
    checkpoint_interval: Option<Setting>,
    #[serde(default)]
    faults: Vec<Fault>,
    probe: Option<Probe>,
    auth: Option<AuthConfig>,
    #[serde(default)]
    publications: Vec<Publication>,
    #[serde(default)]
    tables: Vec<Table>,
}

/// A time setting in the config: a number in the setting's own unit, or text with a unit.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Setting {
    Number(u64),
    Text(String),
}

impl Setting {
    fn duration(&self, unit: Unit) -> Result<Duration, String> {
        match self {
            Setting::Number(n) => pg_duration(&n.to_string(), unit),
            Setting::Text(text) => pg_duration(text, unit),
        }
    }
}

/// A time setting from its flag or, without one, from the config; its name in errors.
fn time_setting(
    name: &str,
    flag: Option<&str>,
    config: Option<&Setting>,
    unit: Unit,
) -> Result<Option<Duration>, String> {
    let time = match (flag, config) {
        (Some(text), _) => pg_duration(text, unit),
        (None, Some(setting)) => setting.duration(unit),
        (None, None) => return Ok(None),
    };
    time.map(Some).map_err(|e| format!("{name}: {e}"))
}

/// The unit of a bare number, as each setting has its own in postgresql.conf.
#[derive(Debug, Clone, Copy)]
pub(super) enum Unit {
    Milliseconds,
    Seconds,
}

/// A time as PostgreSQL reads one (`60s`, `500 ms`, `1min`; a bare number in `unit`).
pub(super) fn pg_duration(text: &str, unit: Unit) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("invalid time {text:?}: expected a number and a unit such as 60s"))?;
    let millis_per = match (suffix.trim(), unit) {
        ("", Unit::Milliseconds) | ("ms", _) => 1,
        ("", Unit::Seconds) | ("s", _) => 1_000,
        ("min", _) => 60_000,
        ("h", _) => 3_600_000,
        ("d", _) => 86_400_000,
        (other, _) => {
            return Err(format!(
                "invalid unit {other:?} in {text:?}: valid units are ms, s, min, h and d"
            ))
        }
    };
    number
        .checked_mul(millis_per)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("time {text:?} is out of range"))
}

#[derive(Debug, Deserialize)]
#[serde(tag = "method", rename_all = "snake_case", deny_unknown_fields)]
enum AuthConfig {
    Trust,
    Password {
        user: String,
        password: String,
    },
    Scram {
        user: String,
        password: Option<String>,
        verifier: Option<String>,
    },
}

impl AuthConfig {
    fn auth(&self) -> Result<Auth, String> {
        Ok(match self {
            AuthConfig::Trust => Auth::trust(),
            AuthConfig::Password { user, password } => Auth::password(user, password),
            AuthConfig::Scram {
                user,
                password: Some(password),
                verifier: None,
            } => Auth::scram(user, password),
            AuthConfig::Scram {
                user,
                password: None,
                verifier: Some(verifier),
            } => Auth::scram_verifier(user, verifier).ok_or_else(|| {
                format!("auth.verifier is not a SCRAM-SHA-256 verifier: {verifier:?}")
            })?,
            AuthConfig::Scram { .. } => {
                return Err(
                    "auth with method scram needs exactly one of password and verifier".into(),
                )
            }
        })
    }
}

/// The password for --user: --password, else --password-file's first line, else
/// PGOUTPUT_SERVE_PASSWORD.
fn password(args: &ServeArgs) -> Result<String, String> {
    if let Some(password) = &args.password {
        return Ok(password.clone());
    }
    if let Some(path) = &args.password_file {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        return Ok(text.lines().next().unwrap_or_default().to_owned());
    }
    std::env::var("PGOUTPUT_SERVE_PASSWORD").map_err(|_| {
        "--user needs a password: --password, --password-file FILE or PGOUTPUT_SERVE_PASSWORD"
            .to_owned()
    })
}

fn read_config(path: &Path) -> Result<Config, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn demo_tables() -> (Table, Table) {
    let accounts = Table::new(16385, "public", "accounts")
        .key_column("id", 23)
        .column("name", 25)
        .column("balance", 20)
        .row([Some("1"), Some("alice"), Some("100")]);
    let events = Table::new(16393, "public", "events")
        .key_column("id", 20)
        .column("kind", 25)
        .column("payload", 17);
    (accounts, events)
}

/// The demo stream: one of each kind of transaction.
fn demo_script(accounts: &Table, events: &Table) -> Script {
    Script::new()
        .transaction(
            Transaction::new()
                .insert(accounts, ["2", "bob", "50"])
                .insert(events, ["1", "signup", "\\x626f62"]),
        )
        .transaction(
            // As PostgreSQL sends them: no old key for an update that keeps the key, the
            // old key for one that changes it, and an unchanged TOAST value only for a
            // variable-length column.
            Transaction::new()
                .update(accounts, None::<Vec<&str>>, ["1", "alice", "80"])
                .update(accounts, Some(vec!["2", "bob", "50"]), ["5", "bob", "50"])
                .update(
                    events,
                    None::<Vec<&str>>,
                    [
                        ColumnValue::from("1"),
                        ColumnValue::from("signup-confirmed"),
                        ColumnValue::UnchangedToast,
                    ],
                ),
        )
        .transaction(Transaction::new().delete(events, ["1", "signup-confirmed", "\\x626f62"]))
        .transaction(Transaction::new().truncate(&[events], TruncateOptions::NONE))
        .transaction(
            Transaction::new()
                .streamed()
                .insert(events, ["2", "bulk", "\\x00"])
                .stream_boundary()
                .aborted_subtransaction(|t| t.insert(events, ["3", "undone", "\\x00"]))
                .insert(events, ["4", "bulk", "\\x01"]),
        )
        .transaction(
            Transaction::new()
                .insert(accounts, ["3", "carol", "0"])
                .prepare("demo-2pc"),
        )
        .commit_prepared("demo-2pc")
}

pub fn serve(args: &ServeArgs) -> Result<ExitCode, String> {
    let mut config = match &args.config {
        Some(path) => read_config(path)?,
        None => Config::default(),
    };
    let (accounts, events) = demo_tables();
    let mut publications = std::mem::take(&mut config.publications);
    let script = match &args.script {
        Some(path) => {
            let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
            if publications.is_empty() {
                publications.push(Publication::all_tables(&args.publication));
            }
            Script::from_json_reader(std::io::BufReader::new(file))
                .map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => {
            if publications.is_empty() {
                publications.push(
                    Publication::new("demo")
                        .table(accounts.clone())
                        .table(events.clone()),
                );
            }
            demo_script(&accounts, &events)
        }
    };
    let mut builder = TestServer::builder()
        .listen(args.listen)
        .script(script)
        // A closed standard error must not take a connection down with it (eprintln!
        // panics when it cannot write).
        .logger(|line| {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "pgoutput serve: {line}");
        });
    for publication in publications {
        builder = builder.publication(publication);
    }
    for table in config.tables {
        builder = builder.table(table);
    }
    if let Some(timeout) = time_setting(
        "wal_sender_timeout",
        args.wal_sender_timeout.as_deref(),
        config.wal_sender_timeout.as_ref(),
        Unit::Milliseconds,
    )? {
        builder = builder.wal_sender_timeout(timeout);
    }
    if let Some(timeout) = time_setting(
        "authentication_timeout",
        args.authentication_timeout.as_deref(),
        config.authentication_timeout.as_ref(),
        Unit::Seconds,
    )? {
        // PostgreSQL allows 1 s to 600 s.
        if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&timeout) {
            return Err(format!(
                "authentication_timeout: {} s is outside the valid range for parameter \"authentication_timeout\" (1 s .. 600 s)",
                timeout.as_secs_f64()
            ));
        }
        builder = builder.authentication_timeout(timeout);
    }
    if let Some(max) = args.max_wal_senders.or(config.max_wal_senders) {
        builder = builder.max_wal_senders(max);
    }
    if let Some(max) = args.max_replication_slots.or(config.max_replication_slots) {
        builder = builder.max_replication_slots(max);
    }
    if let Some(interval) = time_setting(
        "checkpoint_interval",
        args.checkpoint_interval.as_deref(),
        config.checkpoint_interval.as_ref(),
        Unit::Seconds,
    )? {
        if interval.is_zero() {
            return Err("checkpoint_interval: 0 is not a time between checkpoints".into());
        }
        builder = builder.checkpoint_interval(interval);
    }
    for fault in config.faults {
        builder = builder.fault(fault);
    }
    if let Some(probe) = args.probe.map(Probe::every).or(config.probe) {
        builder = builder.probe(probe);
    }
    for text in &args.faults {
        let fault: Fault =
            serde_json::from_str(text).map_err(|e| format!("--fault {text}: {e}"))?;
        builder = builder.fault(fault);
    }
    if let Some(version) = args
        .server_version
        .as_ref()
        .or(config.server_version.as_ref())
    {
        builder = builder.server_version(version);
    }
    if let Some(database) = &config.database {
        builder = builder.database(database);
    }
    if let Some(id) = config.system_identifier {
        builder = builder.system_identifier(id);
    }
    if let Some(lsn) = &config.start_lsn {
        let lsn = lsn.parse().map_err(|e| format!("start_lsn {lsn:?}: {e}"))?;
        builder = builder.start_lsn(lsn);
    }
    if let Some(ms) = config.keepalive_interval_ms {
        builder = builder.keepalive_interval(Duration::from_millis(ms));
    }
    if let Some(auth) = &config.auth {
        builder = builder.auth(auth.auth()?);
    }
    let mut trusting = config
        .auth
        .as_ref()
        .is_none_or(|a| matches!(a, AuthConfig::Trust));
    if let Some(user) = &args.user {
        builder = builder.auth(Auth::scram(user, &password(args)?));
        trusting = false;
    }
    let stop = super::stop_signal()?;
    let server = builder.start().map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput => match &args.script {
            Some(path) => format!("{}: {e}", path.display()),
            None => e.to_string(),
        },
        _ => format!("{}: {e}", args.listen),
    })?;
    // The connection string without its password, which the log is no place for.
    let conninfo = server.connection_string();
    let shown = conninfo.split(" password=").next().unwrap_or_default();
    eprintln!(
        "pgoutput serve: listening on {}; connect with '{shown}'",
        server.addr()
    );
    if trusting && !server.addr().ip().is_loopback() {
        eprintln!(
            "pgoutput serve: warning: listening on {} with trust authentication: anyone who can reach it can connect and read the stream (--user and --password-file require a password)",
            server.addr().ip()
        );
    }
    let server = Arc::new(server);
    let _control = match args.control {
        Some(addr) => {
            let control = Control::start(Arc::clone(&server), addr, args.control_remote)
                .map_err(|e| format!("--control {addr}: {e}"))?;
            eprintln!("pgoutput serve: control API on http://{}/", control.addr());
            Some(control)
        }
        None => None,
    };
    let mut next_id = 100u32;
    let mut last_tick = std::time::Instant::now();
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
        if server.is_shut_down() {
            eprintln!("pgoutput serve: shut down (every connection has ended)");
            return Ok(ExitCode::SUCCESS);
        }
        if last_tick.elapsed() < Duration::from_secs(1) {
            continue;
        }
        last_tick = std::time::Instant::now();
        if args.script.is_none() {
            next_id += 1;
            let id = next_id.to_string();
            server
                .append(Event::Transaction(
                    Transaction::new().insert(&events, [id.as_str(), "tick", "\\x00"]),
                ))
                .map_err(|e| format!("demo: {e}"))?;
        }
    }
    eprintln!("pgoutput serve: stopping");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `when` and `then` example of `--help` is a rule that parses and can work.
    #[test]
    fn the_help_texts_fault_examples_are_rules() {
        let command = <ServeArgs as clap::Args>::augment_args(clap::Command::new("serve"));
        let help = command.get_after_help().unwrap().to_string();
        // Each example to its closing brace (an inject's message nests one).
        let objects = |key: &str| -> Vec<String> {
            help.match_indices(&format!("{{\"{key}\":"))
                .map(|(at, _)| {
                    let mut depth = 0;
                    let end = help[at..]
                        .char_indices()
                        .find(|&(_, c)| {
                            depth += match c {
                                '{' => 1,
                                '}' => -1,
                                _ => 0,
                            };
                            depth == 0
                        })
                        .unwrap()
                        .0;
                    help[at..=at + end].to_owned()
                })
                .collect()
        };
        let (whens, thens) = (objects("on"), objects("do"));
        assert_eq!((whens.len(), thens.len()), (10, 11), "{whens:?} {thens:?}");
        for when in &whens {
            for then in &thens {
                let rule = format!(r#"{{"when": {when}, "then": {then}}}"#);
                let fault: Fault =
                    serde_json::from_str(&rule).unwrap_or_else(|e| panic!("{rule}: {e}"));
                // Refused, as the help says: most actions on connect, and a message of
                // the rule's own at a byte of a frame.
                let connect_only = matches!(
                    fault.when,
                    pgoutput_harness::faults::Trigger::Connect { .. }
                );
                let sends_at_a_byte = matches!(
                    fault.when,
                    pgoutput_harness::faults::Trigger::Message { byte: Some(_), .. }
                ) && matches!(
                    fault.then,
                    pgoutput_harness::faults::Action::RequestReply
                        | pgoutput_harness::faults::Action::Inject { .. }
                );
                let allowed = fault.check();
                assert!(
                    allowed.is_ok() || connect_only || sends_at_a_byte,
                    "{rule}: {allowed:?}"
                );
            }
        }
    }

    #[test]
    fn times_read_as_postgresql_reads_them() {
        let ms = |text, unit| pg_duration(text, unit).map(|d| d.as_millis());
        assert_eq!(ms("60s", Unit::Milliseconds), Ok(60_000));
        assert_eq!(ms("500 ms", Unit::Seconds), Ok(500));
        assert_eq!(ms("1min", Unit::Seconds), Ok(60_000));
        assert_eq!(ms("250", Unit::Milliseconds), Ok(250));
        assert_eq!(ms("30", Unit::Seconds), Ok(30_000));
        assert_eq!(ms("0", Unit::Milliseconds), Ok(0));
        assert!(ms("5 weeks", Unit::Seconds)
            .unwrap_err()
            .contains("valid units are ms, s, min, h and d"));
        assert!(ms("soon", Unit::Seconds).is_err());
        assert!(ms("99999999999999999999d", Unit::Seconds).is_err());
    }
}
