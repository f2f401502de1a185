//! `pgoutput tail` against the test server for every protocol version (over SCRAM), and
//! `pgoutput serve` answering a client on its own.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pgoutput_codec::client::{ConnInfo, Connection};
use pgoutput_codec::server::{
    Auth, Publication, Script, StreamOptions, Table, TestServer, Transaction,
};
use pgoutput_codec::{Decoder, IntoOwned, PgOutputMessage, ProtocolVersion, Streaming};

#[test]
fn tail_streams_every_protocol_version_over_scram() {
    let t = Table::new(16385, "public", "t")
        .key_column("id", 23)
        .column("v", 25);
    let script = Script::new()
        .transaction(Transaction::new().insert(&t, ["1", "a"]))
        .transaction(Transaction::new().streamed().insert(&t, ["2", "b"]).update(
            &t,
            Some(vec!["2", "b"]),
            ["2", "c"],
        ))
        .transaction(Transaction::new().insert(&t, ["3", "p"]).prepare("g"))
        .commit_prepared("g");
    let server = TestServer::builder()
        .auth(Auth::scram("rep", "pw"))
        .publication(Publication::new("p").table(t))
        .script(script)
        .start()
        .unwrap();
    let end = server.wal_end();
    for (version, streaming) in [
        (1, Streaming::Off),
        (2, Streaming::On),
        (3, Streaming::On),
        (4, Streaming::Parallel),
    ] {
        let slot = format!("tail{version}");
        let streaming_arg = match streaming {
            Streaming::Off => "off",
            Streaming::On => "on",
            Streaming::Parallel => "parallel",
        };
        let output = Command::new(env!("CARGO_BIN_EXE_pgoutput"))
            .args([
                "tail",
                &server.connection_string(),
                "--slot",
                &slot,
                "--create-slot",
                "--publication",
                "p",
            ])
            .args([
                "--proto-version",
                &version.to_string(),
                "--streaming",
                streaming_arg,
                "--end-lsn",
                &end.to_string(),
            ])
            .env("PGPASSWORD", "pw")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let version = ProtocolVersion::from_number(version).unwrap();
        let options = StreamOptions::new(version, &["p"]).streaming(streaming);
        let mut decoder = Decoder::new(version, streaming).unwrap();
        let frames = server.render(&options).unwrap();
        let expected: Vec<PgOutputMessage<'_>> = frames
            .iter()
            .map(|f| decoder.decode(&f.payload).unwrap())
            .collect();
        let printed: Vec<PgOutputMessage<'_>> = String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .map(|line| {
                serde_json::from_str::<PgOutputMessage<'_>>(line)
                    .unwrap()
                    .into_owned()
            })
            .collect();
        assert_eq!(printed, expected, "protocol {version:?}");
        assert_eq!(server.confirmed_flush_lsn(&slot), Some(end));
    }
}

#[test]
fn serve_runs_on_its_own() {
    let port = 40_000 + (std::process::id() % 20_000) as u16;
    let mut child = Command::new(env!("CARGO_BIN_EXE_pgoutput"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let info = ConnInfo::parse(
        Some(&format!(
            "host=127.0.0.1 port={port} user=anyone dbname=postgres"
        )),
        |_| None,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut conn = loop {
        match Connection::connect(&info) {
            Ok(conn) => break conn,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => panic!("pgoutput serve does not answer: {e}"),
        }
    };
    let rows = conn.simple_query("IDENTIFY_SYSTEM").unwrap();
    assert_eq!(rows[0][3].as_deref(), Some("postgres"));
    conn.simple_query("CREATE_REPLICATION_SLOT demo_slot LOGICAL pgoutput")
        .unwrap();
    conn.start_replication("START_REPLICATION SLOT demo_slot LOGICAL 0/0 (proto_version '1', publication_names 'demo')").unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
}
