//! `serve`: run the test walsender from the command line.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use pgoutput_codec::server::{Auth, Event, Publication, Script, Table, TestServer, Transaction};
use pgoutput_codec::{ColumnValue, TruncateOptions};

#[derive(Debug, Args)]
#[command(after_help = "\
Serves a pgoutput stream to replication clients (pg_recvlogical, psycopg2, a PostgreSQL
subscriber, pgoutput tail). Without --script it serves a demo: publication `demo` in database
`postgres` with tables public.accounts and public.events, inserts, updates, deletes, a
truncate, a streamed transaction with a subtransaction abort, a two-phase transaction, then a
new transaction every second. Logs each client, its options and confirmed positions.

Example:
  pgoutput serve --listen 127.0.0.1:5433 &
  pg_recvlogical -d 'host=127.0.0.1 port=5433 user=me dbname=postgres' --slot s \\
      --create-slot --plugin pgoutput
  pg_recvlogical -d 'host=127.0.0.1 port=5433 user=me dbname=postgres' --slot s --start \\
      -o proto_version=1 -o publication_names=demo -f -")]
pub struct ServeArgs {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:5433")]
    listen: SocketAddr,
    /// A script: JSON lines as `pgoutput decode` and `pgoutput tail` print them.
    #[arg(long)]
    script: Option<std::path::PathBuf>,
    /// The publication the script's tables belong to (FOR ALL TABLES).
    #[arg(long, default_value = "demo")]
    publication: String,
    /// The server_version to announce (clients choose their options by it).
    #[arg(long, default_value = "18.6")]
    server_version: String,
    /// Require this user and password (SCRAM-SHA-256) instead of trusting everyone.
    #[arg(long, requires = "password")]
    user: Option<String>,
    /// The password for --user.
    #[arg(long, requires = "user")]
    password: Option<String>,
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
            Transaction::new()
                .update(
                    accounts,
                    Some(vec!["1", "alice", "100"]),
                    ["1", "alice", "80"],
                )
                .update(
                    accounts,
                    None::<Vec<&str>>,
                    [
                        ColumnValue::from("2"),
                        ColumnValue::from("bob"),
                        ColumnValue::UnchangedToast,
                    ],
                ),
        )
        .transaction(Transaction::new().delete(events, ["1", "signup", "\\x626f62"]))
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
    let (accounts, events) = demo_tables();
    let (script, publication) = match &args.script {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let script =
                Script::from_json_lines(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            (script, Publication::all_tables(&args.publication))
        }
        None => (
            demo_script(&accounts, &events),
            Publication::new("demo")
                .table(accounts.clone())
                .table(events.clone()),
        ),
    };
    let mut builder = TestServer::builder()
        .listen(args.listen)
        .server_version(&args.server_version)
        .publication(publication)
        .script(script)
        .logger(|line| eprintln!("pgoutput serve: {line}"));
    if let (Some(user), Some(password)) = (&args.user, &args.password) {
        builder = builder.auth(Auth::scram(user, password));
    }
    let server = builder
        .start()
        .map_err(|e| format!("{}: {e}", args.listen))?;
    eprintln!(
        "pgoutput serve: listening on {}; connect with '{}'",
        server.addr(),
        server.connection_string()
    );
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
            .map_err(|e| format!("signal handler: {e}"))?;
    }
    let mut next_id = 100u32;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1000));
        if args.script.is_none() {
            next_id += 1;
            let id = next_id.to_string();
            server.append(Event::Transaction(
                Transaction::new().insert(&events, [id.as_str(), "tick", "\\x00"]),
            ));
        }
    }
    eprintln!("pgoutput serve: stopping");
    server.shutdown();
    Ok(ExitCode::SUCCESS)
}
