//! `pgoutput tail` against the test server for every protocol version (over SCRAM), and
//! `pgoutput serve` answering a client on its own.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pgoutput_client::StreamOptions;
use pgoutput_client::{ConnInfo, Connection};
use pgoutput_codec::{Decoder, IntoOwned, PgOutputMessage, ProtocolVersion, Streaming};
use pgoutput_harness::server::{Auth, Publication, Script, Table, TestServer, Transaction};

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
    let port = free_port();
    let (mut child, mut conn) = spawn_serve(
        &["--listen", &format!("127.0.0.1:{port}")],
        &format!("host=127.0.0.1 port={port} user=anyone dbname=postgres"),
    );
    let rows = conn.simple_query("IDENTIFY_SYSTEM").unwrap();
    assert_eq!(rows[0][3].as_deref(), Some("postgres"));
    conn.simple_query("CREATE_REPLICATION_SLOT demo_slot LOGICAL pgoutput")
        .unwrap();
    conn.start_replication("START_REPLICATION SLOT demo_slot LOGICAL 0/0 (proto_version '1', publication_names 'demo')").unwrap();
    // The demo stream, then a new transaction every second.
    let mut commits = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while commits < 8 && Instant::now() < deadline {
        if let pgoutput_client::CopyEvent::Data(frame) =
            conn.recv_copy_data(Duration::from_millis(200)).unwrap()
        {
            if frame[0] == b'w' && frame[25] == b'C' {
                commits += 1;
            }
        }
    }
    assert_eq!(commits, 8, "the demo's six commits and two live ones");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A port nothing listens on now: one the system hands out, released at once. (A fixed
/// port in the ephemeral range could be taken by any outgoing connection.)
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `pgoutput serve` with `args` and waits until it answers with `conninfo`.
fn spawn_serve(args: &[&str], conninfo: &str) -> (std::process::Child, Connection) {
    let child = Command::new(env!("CARGO_BIN_EXE_pgoutput"))
        .arg("serve")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let info = ConnInfo::parse(Some(conninfo), |_| None).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match Connection::connect(&info) {
            Ok(conn) => return (child, conn),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => panic!("pgoutput serve does not answer: {e}"),
        }
    }
}

#[test]
fn serve_with_a_config_file_and_a_script() {
    let dir = std::env::temp_dir().join(format!("pgoutput-serve-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.json");
    std::fs::write(
        &config,
        r#"{"server_version": "15.20", "database": "app",
            "auth": {"method": "scram", "user": "rep", "password": "pw"},
            "publications": [{"name": "p", "tables": [{"oid": 16385, "name": "t",
              "columns": [{"name": "id", "type_oid": 23, "key": true}, {"name": "v", "type_oid": 25}],
              "rows": [["1", "a"]]}]}]}"#,
    )
    .unwrap();
    let script = dir.join("script.jsonl");
    std::fs::write(
        &script,
        "{\"type\":\"begin\"}\n{\"type\":\"insert\",\"relation_oid\":16385,\"new_tuple\":[{\"text\":\"2\"},{\"text\":\"b\"}]}\n{\"type\":\"commit\"}\n",
    )
    .unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let (mut child, mut conn) = spawn_serve(
        &[
            "--listen",
            &listen,
            "--config",
            config.to_str().unwrap(),
            "--script",
            script.to_str().unwrap(),
        ],
        &format!("host=127.0.0.1 port={port} user=rep password=pw dbname=app"),
    );
    assert_eq!(
        conn.simple_query("IDENTIFY_SYSTEM").unwrap()[0][3].as_deref(),
        Some("app")
    );
    conn.simple_query("CREATE_REPLICATION_SLOT s LOGICAL pgoutput")
        .unwrap();
    // A PostgreSQL 15 server speaks protocol 3 at most.
    let err = conn
        .start_replication(
            "START_REPLICATION SLOT s LOGICAL 0/0 (proto_version '4', publication_names 'p')",
        )
        .unwrap_err();
    assert_eq!(err.server_error().unwrap().code, "0A000");
    conn.start_replication(
        "START_REPLICATION SLOT s LOGICAL 0/0 (proto_version '3', publication_names 'p')",
    )
    .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();

    std::fs::write(&config, r#"{"server_versoin": "15"}"#).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_pgoutput"))
        .args([
            "serve",
            "--listen",
            &listen,
            "--config",
            config.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown field `server_versoin`"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_takes_postgresql_limits_from_flags_and_the_config() {
    let dir = std::env::temp_dir().join(format!("pgoutput-serve-limits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.json");
    std::fs::write(&config, r#"{"max_replication_slots": 1}"#).unwrap();
    let port = free_port();
    let conninfo = format!("host=127.0.0.1 port={port} user=anyone dbname=postgres");
    let (mut child, mut conn) = spawn_serve(
        &[
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--config",
            config.to_str().unwrap(),
            "--max-wal-senders",
            "1",
            "--wal-sender-timeout",
            "300ms",
        ],
        &conninfo,
    );
    conn.simple_query("CREATE_REPLICATION_SLOT one LOGICAL pgoutput")
        .unwrap();
    let err = conn
        .simple_query("CREATE_REPLICATION_SLOT two LOGICAL pgoutput")
        .unwrap_err();
    let err = err.server_error().unwrap();
    assert_eq!(
        (err.code.as_str(), err.message.as_str()),
        ("53400", "all replication slots are in use")
    );
    let info = ConnInfo::parse(Some(&conninfo), |_| None).unwrap();
    let err = Connection::connect(&info).unwrap_err();
    assert_eq!(err.server_error().unwrap().code, "53300");
    // A client that never replies is dropped after the timeout.
    conn.start_replication(
        "START_REPLICATION SLOT one LOGICAL 0/0 (proto_version '1', publication_names 'demo')",
    )
    .unwrap();
    let started = Instant::now();
    let ended = loop {
        match conn.recv_copy_data(Duration::from_millis(100)) {
            Ok(_) if started.elapsed() < Duration::from_secs(10) => {}
            other => break other,
        }
    };
    assert!(ended.is_err(), "still streaming after 10 s: {ended:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `pgoutput serve` with table `t (id int4 key, v text)` in publication `p` (and the
/// config's `settings`, JSON members with a trailing comma), `transactions` scripted
/// transactions of two inserts each (ids from 1), and its control API; then
/// `crates/cli/tests/{name}.py DSN CONTROL_URL` run against it to its end. The server
/// still runs.
fn python_against_serve(
    name: &str,
    settings: &str,
    transactions: usize,
) -> (std::process::Child, std::process::Output) {
    let dir = std::env::temp_dir().join(format!("pgoutput-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.json");
    std::fs::write(
        &config,
        format!(
            r#"{{{settings} "publications": [{{"name": "p", "tables": [{{"oid": 16385, "name": "t",
              "columns": [{{"name": "id", "type_oid": 23, "key": true}}, {{"name": "v", "type_oid": 25}}]}}]}}]}}"#
        ),
    )
    .unwrap();
    let mut script = String::new();
    for t in 0..transactions {
        script.push_str("{\"type\":\"begin\"}\n");
        for r in 1..=2 {
            let id = t * 2 + r;
            script.push_str(&format!(
                "{{\"type\":\"insert\",\"relation_oid\":16385,\"new_tuple\":[{{\"text\":\"{id}\"}},{{\"text\":\"v\"}}]}}\n"
            ));
        }
        script.push_str("{\"type\":\"commit\"}\n");
    }
    let script_path = dir.join("script.jsonl");
    std::fs::write(&script_path, script).unwrap();
    let port = free_port();
    let control_port = free_port();
    let conninfo = format!("host=127.0.0.1 port={port} user=py dbname=postgres");
    let (child, conn) = spawn_serve(
        &[
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--config",
            config.to_str().unwrap(),
            "--script",
            script_path.to_str().unwrap(),
            "--control",
            &format!("127.0.0.1:{control_port}"),
        ],
        &conninfo,
    );
    drop(conn);
    let python = Command::new("python3")
        .arg(format!("{}/tests/{name}.py", env!("CARGO_MANIFEST_DIR")))
        .arg(&conninfo)
        .arg(format!("http://127.0.0.1:{control_port}"))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (child, python)
}

/// The judge driven from Python (psycopg2 and urllib alone) through the control API:
/// `crates/cli/tests/judge_api.py`, against `pgoutput serve` at full speed with the probe
/// armed by `POST /probe`.
#[test]
fn the_judge_over_http_catches_a_consumer_confirming_at_begin_in_20_of_20_runs() {
    if !pgoutput_tests::pg::psycopg2_found() {
        return;
    }
    // Each of the 40-odd runs makes a slot of its own: more than PostgreSQL's default 10.
    let (mut child, python) = python_against_serve(
        "judge_api",
        r#""wal_sender_timeout": "2s", "max_replication_slots": 100,"#,
        3,
    );
    let _ = child.kill();
    let _ = child.wait();
    let stderr = String::from_utf8_lossy(&python.stderr);
    assert!(python.status.success(), "{stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&python.stdout).unwrap();
    assert_eq!(summary["confirm_at_begin_caught"], 20, "{summary}");
    assert_eq!(summary["correct_clean"], 20, "{summary}");
    assert_eq!(summary["faulty_clean"], true, "{summary}");
    assert_eq!(summary["stuck"], "no_timely_reply", "{summary}");
    let idle = &summary["idle"];
    assert!(
        idle["ConfirmsOnNextBegin"]
            .as_str()
            .is_some_and(|t| t.contains("while idle although the WAL end was")),
        "{summary}"
    );
    assert!(
        idle["ConfirmsCommitLsn"]
            .as_str()
            .is_some_and(|t| t.contains("inside a transaction it had been sent whole")),
        "{summary}"
    );
    assert_eq!(idle["ConfirmsOnlyTransactions"], "clean", "{summary}");
    assert_eq!(idle["Consumer"], "clean", "{summary}");
}

/// A Python consumer (psycopg2) driven through the control API with urllib alone, as a
/// test suite in another language would: `crates/cli/tests/control_api.py`.
#[test]
fn the_control_api_drives_a_python_consumer_through_faults() {
    if !pgoutput_tests::pg::psycopg2_found() {
        return;
    }
    let (mut child, python) = python_against_serve("control_api", "", 4);
    let stderr = String::from_utf8_lossy(&python.stderr);
    if !python.status.success() {
        let _ = child.kill();
    }
    assert!(python.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&python.stdout).trim(),
        r#"{"applied": [[1, 2], [3, 4], [5, 6], [7, 8], [9]], "disconnects": 2}"#
    );
    // After the fast shutdown serve exits by itself.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "serve did not exit after /shutdown"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success());
}

/// A parsed connection string.
fn conninfo(text: &str) -> ConnInfo {
    ConnInfo::parse(Some(text), |_| None).unwrap()
}

/// Starts `pgoutput serve` with `args` and `env`, and returns it with its standard
/// error up to the "listening" line and what follows within half a second (a warning).
/// The rest of its standard error is read and dropped while it runs.
fn spawn_serve_logged(args: &[&str], env: &[(&str, &str)]) -> (std::process::Child, String) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_pgoutput"))
        .arg("serve")
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let mut log = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !log.contains("listening on") && Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => log.push_str(&(line + "\n")),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => break,
        }
    }
    while let Ok(line) = rx.recv_timeout(Duration::from_millis(500)) {
        log.push_str(&(line + "\n"));
    }
    (child, log)
}

#[test]
fn serve_keeps_passwords_out_of_sight_and_refuses_empty_ones() {
    // An empty password: PostgreSQL stores none, so neither does serve.
    let port = free_port();
    let output = Command::new(env!("CARGO_BIN_EXE_pgoutput"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--user", "rep", "--password", ""])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("empty string is not a valid password")
    );

    // --password-file, and the password is not in the log line.
    let dir = std::env::temp_dir().join(format!("pgoutput-serve-pw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("pw");
    std::fs::write(&file, "s3cret-from-file\n").unwrap();
    let port = free_port();
    let (mut child, log) = spawn_serve_logged(
        &[
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--user",
            "rep",
            "--password-file",
            file.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!log.contains("s3cret"), "{log}");
    let info = conninfo(&format!(
        "host=127.0.0.1 port={port} user=rep password=s3cret-from-file dbname=postgres"
    ));
    Connection::connect(&info).expect("the password from the file is the one");
    let wrong = conninfo(&format!(
        "host=127.0.0.1 port={port} user=rep password=s3cret-from-fil dbname=postgres"
    ));
    let err = Connection::connect(&wrong).unwrap_err();
    assert_eq!(err.server_error().unwrap().code, "28P01");
    child.kill().unwrap();
    child.wait().unwrap();

    // The environment variable, and a cleartext password from --config kept out of the log.
    let config = dir.join("config.json");
    std::fs::write(
        &config,
        r#"{"auth": {"method": "password", "user": "rep", "password": "hunter2 with spaces"}}"#,
    )
    .unwrap();
    let port = free_port();
    let (mut child, log) = spawn_serve_logged(
        &[
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--config",
            config.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!log.contains("hunter2"), "{log}");
    let info = conninfo(&format!(
        "host=127.0.0.1 port={port} user=rep password='hunter2 with spaces' dbname=postgres"
    ));
    Connection::connect(&info).expect("the configured password logs in");
    child.kill().unwrap();
    child.wait().unwrap();
    let port = free_port();
    let (mut child, _) = spawn_serve_logged(
        &["--listen", &format!("127.0.0.1:{port}"), "--user", "rep"],
        &[("PGOUTPUT_SERVE_PASSWORD", "from-the-env")],
    );
    let info = conninfo(&format!(
        "host=127.0.0.1 port={port} user=rep password=from-the-env dbname=postgres"
    ));
    Connection::connect(&info).expect("the password from the environment is the one");
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_warns_when_it_trusts_everyone_beyond_loopback() {
    let port = free_port();
    let (mut child, log) = spawn_serve_logged(&["--listen", &format!("0.0.0.0:{port}")], &[]);
    assert!(
        log.contains("warning: listening on 0.0.0.0 with trust authentication"),
        "{log}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let port = free_port();
    let (mut child, log) = spawn_serve_logged(&["--listen", &format!("127.0.0.1:{port}")], &[]);
    assert!(!log.contains("warning"), "{log}");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// What `pgoutput tail --wal-positions` writes is a script: served back, each XLogData
/// frame carries the recorded `dataStart` and `walEnd`, and the Relation recorded inside
/// the transaction (pgoutput's own, before the table's first change) is sent there again.
#[test]
fn serve_replays_a_tail_recording_with_its_positions() {
    let dir = std::env::temp_dir().join(format!("pgoutput-serve-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("recording.jsonl");
    std::fs::write(
        &script,
        r#"{"wal_start":"0/1711FD0","wal_end":"0/1711FD0","type":"begin","final_lsn":"0/1712080","commit_timestamp":"2026-12-01 20:00:00+00","xid":784}
{"wal_start":"0/0","wal_end":"0/0","type":"relation","xid":null,"relation_oid":16400,"namespace":"public","relation_name":"t","replica_identity":"default","columns":[{"flags":1,"name":"id","type_oid":23,"type_modifier":-1}]}
{"wal_start":"0/1711FD0","wal_end":"0/1711FD0","type":"insert","xid":null,"relation_oid":16400,"new_tuple":[{"text":"7"}]}
{"wal_start":"0/17120B0","wal_end":"0/17120B0","type":"commit","flags":0,"commit_lsn":"0/1712080","end_lsn":"0/17120B0","commit_timestamp":"2026-12-01 20:00:00+00"}
"#,
    )
    .unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let (mut child, mut conn) = spawn_serve(
        &[
            "--listen",
            &listen,
            "--script",
            script.to_str().unwrap(),
            "--publication",
            "p",
        ],
        &format!("host=127.0.0.1 port={port} user=me dbname=postgres"),
    );
    conn.simple_query("CREATE_REPLICATION_SLOT s LOGICAL pgoutput")
        .unwrap();
    conn.start_replication(
        "START_REPLICATION SLOT s LOGICAL 0/0 (proto_version '1', publication_names 'p')",
    )
    .unwrap();
    let mut frames = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while frames.len() < 4 && Instant::now() < deadline {
        if let pgoutput_client::CopyEvent::Data(data) =
            conn.recv_copy_data(Duration::from_millis(200)).unwrap()
        {
            if data[0] == b'w' {
                let lsn = |at: usize| u64::from_be_bytes(data[at..at + 8].try_into().unwrap());
                frames.push((lsn(1), lsn(9), data[25]));
            }
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        frames,
        [
            (0x1711FD0, 0x1711FD0, b'B'),
            (0, 0, b'R'),
            (0x1711FD0, 0x1711FD0, b'I'),
            (0x17120B0, 0x17120B0, b'C'),
        ]
    );
}
