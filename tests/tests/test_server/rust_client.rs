//! This crate's replication client against the test server: every option set byte for
//! byte through the consumer API, confirmed positions, option errors, resuming, several
//! clients, hostile input.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use pgoutput_client::StreamOptions;
use pgoutput_client::{ClientError, ConnInfo, Connection, Consumer, ConsumerConfig};
use pgoutput_codec::{Encoder, Lsn, ProtocolVersion, Streaming};
use pgoutput_harness::server::{Auth, TestServer};

use super::{option_sets, publication, script};

fn server() -> TestServer {
    TestServer::builder()
        // A slot per option set: more than PostgreSQL's default of 10.
        .max_replication_slots(64)
        .publication(publication())
        .script(script())
        .start()
        .expect("the test server starts")
}

fn connect(server: &TestServer) -> Connection {
    let info = ConnInfo::parse(Some(&server.connection_string()), |_| None).unwrap();
    Connection::connect(&info).expect("connects")
}

/// A consumer of `slot` (through `client::Consumer`, status updates every 100 ms), whose
/// messages are re-encoded by a session encoder: the bytes the server sent.
struct Reader {
    consumer: Consumer,
    encoder: Encoder,
}

impl Reader {
    fn start(conn: Connection, slot: &str, options: &StreamOptions) -> Reader {
        let config =
            ConsumerConfig::new(slot, options.clone()).status_interval(Duration::from_millis(100));
        Reader {
            consumer: Consumer::start(conn, None, config).expect("streaming starts"),
            encoder: Encoder::new(options.proto_version, options.streaming).unwrap(),
        }
    }

    /// The payloads until the server reports its WAL end at `until` with nothing more.
    fn until(&mut self, until: Lsn) -> Vec<Vec<u8>> {
        let mut payloads = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            assert!(
                Instant::now() < deadline,
                "the stream did not reach {until}"
            );
            let event = self
                .consumer
                .next_within(Duration::from_millis(100))
                .unwrap();
            if let Some(event) = event {
                assert!(event.wal_start == event.wal_end);
                payloads.push(self.encoder.encode(&event.message).unwrap());
            } else if self.consumer.server_wal_end() >= Some(until) {
                return payloads;
            }
        }
    }
}

#[test]
fn every_option_set_byte_for_byte() {
    let server = server();
    let end = server.wal_end();
    for (i, options) in option_sets().iter().enumerate() {
        let slot = format!("s{i}");
        let mut conn = connect(&server);
        conn.simple_query(&format!(
            "CREATE_REPLICATION_SLOT \"{slot}\" LOGICAL pgoutput (SNAPSHOT 'nothing')"
        ))
        .unwrap();
        let mut reader = Reader::start(conn, &slot, options);
        let payloads = reader.until(end);
        let expected: Vec<Vec<u8>> = server
            .render(options)
            .unwrap()
            .into_iter()
            .map(|f| f.payload)
            .collect();
        assert_eq!(payloads, expected, "{options:?}");
        // Streaming clients see the aborted transaction; others do not.
        let tags: Vec<u8> = payloads.iter().map(|p| p[0]).collect();
        assert_eq!(
            tags.contains(&b'S'),
            options.streaming != Streaming::Off,
            "{options:?}"
        );
        assert_eq!(tags.contains(&b'K'), options.two_phase, "{options:?}");
        reader.consumer.confirm(end);
        assert_eq!(
            server.wait_for_confirmed_flush(&slot, end, Duration::from_secs(5)),
            Ok(end)
        );
        reader.consumer.close();
    }
    let client = &server.clients()[0];
    assert_eq!(client.commands.len(), 3, "{:?}", client.commands);
    assert_eq!(client.commands[1], "SHOW wal_sender_timeout");
    assert!(client.commands[2].starts_with("START_REPLICATION SLOT \"s0\""));
    assert_eq!(client.status_updates.last().unwrap().update.flush_lsn, end);
}

#[test]
fn reconnecting_resumes_after_the_confirmed_position() {
    let server = server();
    let options = StreamOptions::new(ProtocolVersion::V1, &["p"]);
    let events = server.events();
    let first_end = events[0].end_lsn();
    let mut conn = connect(&server);
    conn.simple_query("CREATE_REPLICATION_SLOT resume LOGICAL pgoutput")
        .unwrap();
    let mut reader = Reader::start(conn, "resume", &options);
    let all = reader.until(server.wal_end());
    reader.consumer.confirm(first_end);
    server
        .wait_for_confirmed_flush("resume", first_end, Duration::from_secs(5))
        .unwrap();
    drop(reader);
    let rest = Reader::start(connect(&server), "resume", &options).until(server.wal_end());
    // The first transaction (Begin, Relation t1, 2 inserts, Relation t2, insert, Commit) is
    // not sent again; the rest comes with the Relations a new session needs.
    assert_eq!(rest.first().map(|p| p[0]), Some(b'B'));
    assert!(rest.len() < all.len());
    assert_eq!(rest.last(), all.last());
}

#[test]
fn option_errors_are_postgres_errors() {
    let server = server();
    let mut conn = connect(&server);
    conn.simple_query("CREATE_REPLICATION_SLOT e LOGICAL pgoutput")
        .unwrap();
    let cases = [
        (
            "proto_version '5', publication_names 'p'",
            "0A000",
            "client sent proto_version=5 but server only supports protocol 4 or lower",
        ),
        (
            "proto_version '3', publication_names 'p', streaming 'parallel'",
            "22023",
            "requested proto_version=3 does not support parallel streaming, need 4 or higher",
        ),
        (
            "proto_version '1', publication_names 'p', binary '1'",
            "42601",
            "binary requires a Boolean value",
        ),
        (
            "proto_version '1', publication_names 'p', colour 'red'",
            "XX000",
            "unrecognized pgoutput option: colour",
        ),
        (
            "publication_names 'p'",
            "22023",
            "option \"proto_version\" missing",
        ),
    ];
    for (options, code, message) in cases {
        let err = conn
            .start_replication(&format!("START_REPLICATION SLOT e LOGICAL 0/0 ({options})"))
            .unwrap_err();
        let err = err.server_error().expect("an ErrorResponse");
        assert_eq!((err.code.as_str(), err.message.as_str()), (code, message));
    }
    let err = conn
        .start_replication(
            "START_REPLICATION SLOT nope LOGICAL 0/0 (proto_version '1', publication_names 'p')",
        )
        .unwrap_err();
    assert_eq!(err.server_error().unwrap().code, "42704");
    let err = conn
        .simple_query("CREATE_REPLICATION_SLOT e LOGICAL pgoutput")
        .unwrap_err();
    assert_eq!(err.server_error().unwrap().code, "42710");
    let err = conn.simple_query("SELECT secrets FROM vault").unwrap_err();
    assert_eq!(err.server_error().unwrap().code, "0A000");
    let err = conn.simple_query("START_REPLICATION SLOT").unwrap_err();
    assert_eq!(err.server_error().unwrap().code, "42601");
    // The connection is still usable after every error.
    assert_eq!(conn.simple_query("IDENTIFY_SYSTEM").unwrap().len(), 1);
}

#[test]
fn authentication() {
    for auth in [
        Auth::scram("alice", "s3cret"),
        Auth::password("alice", "s3cret"),
    ] {
        let server = TestServer::builder().auth(auth).start().unwrap();
        let good = format!(
            "{} password=s3cret",
            server.connection_string().replace(" password=s3cret", "")
        );
        let info = ConnInfo::parse(Some(&good), |_| None).unwrap();
        Connection::connect(&info).expect("the right password logs in");
        // Wrong, a prefix, one byte more, one byte changed: compared in constant time,
        // each is refused alike.
        for wrong in ["wrong", "s3cre", "s3crett", "s3creT"] {
            let bad = format!(
                "{} password={wrong}",
                server.connection_string().replace(" password=s3cret", "")
            );
            let info = ConnInfo::parse(Some(&bad), |_| None).unwrap();
            match Connection::connect(&info) {
                Err(ClientError::Server(err)) => assert_eq!(
                    (err.code.as_str(), err.message.as_str()),
                    ("28P01", "password authentication failed for user \"alice\"")
                ),
                other => panic!("password {wrong:?}: {other:?}"),
            }
        }
    }
}

/// Several clients at once; one killed mid-stream, one sending garbage, one stalling:
/// the others finish byte for byte.
#[test]
fn misbehaving_clients_affect_no_one_else() {
    let server = server();
    let end = server.wal_end();
    let addr = server.addr();
    let options = StreamOptions::new(ProtocolVersion::V4, &["p"]).streaming(Streaming::Parallel);
    let expected: Vec<Vec<u8>> = server
        .render(&options)
        .unwrap()
        .into_iter()
        .map(|f| f.payload)
        .collect();
    let garbage = std::thread::spawn(move || {
        let mut socket = TcpStream::connect(addr).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        socket
            .write_all(b"\x00\x00\x00\x08\x04\xd2\x16\x2fGARBAGE\xff\xff\xff\xff")
            .unwrap();
        let mut reply = Vec::new();
        let _ = socket.read_to_end(&mut reply);
        // 'N' for the SSL request; then "GARB" as the next packet's length, which
        // PostgreSQL does not read: the close, without a word (the twins test shows it).
        assert_eq!(reply, b"N");
    });
    let stalled = TcpStream::connect(addr).unwrap();
    let mut killed = connect(&server);
    killed
        .simple_query("CREATE_REPLICATION_SLOT killed LOGICAL pgoutput")
        .unwrap();
    killed
        .start_replication(
            "START_REPLICATION SLOT killed LOGICAL 0/0 (proto_version '1', publication_names 'p')",
        )
        .unwrap();
    drop(killed);
    let handles: Vec<_> = (0..3)
        .map(|i| {
            let info = ConnInfo::parse(Some(&server.connection_string()), |_| None).unwrap();
            let options = options.clone();
            std::thread::spawn(move || {
                let mut conn = Connection::connect(&info).unwrap();
                conn.simple_query(&format!("CREATE_REPLICATION_SLOT c{i} LOGICAL pgoutput"))
                    .unwrap();
                Reader::start(conn, &format!("c{i}"), &options).until(end)
            })
        })
        .collect();
    for handle in handles {
        assert_eq!(handle.join().unwrap(), expected);
    }
    garbage.join().unwrap();
    drop(stalled);
    // The killed client's slot is free again.
    let deadline = Instant::now() + Duration::from_secs(5);
    while server
        .slots()
        .iter()
        .any(|s| s.name == "killed" && s.active_client.is_some())
    {
        assert!(
            Instant::now() < deadline,
            "the killed client's slot stays active"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn appended_transactions_reach_connected_clients() {
    let server = server();
    let mut conn = connect(&server);
    conn.simple_query("CREATE_REPLICATION_SLOT live LOGICAL pgoutput")
        .unwrap();
    let options = StreamOptions::new(ProtocolVersion::V1, &["p"]);
    let mut reader = Reader::start(conn, "live", &options);
    let before = reader.until(server.wal_end());
    let end = server
        .append(pgoutput_harness::server::Event::Transaction(
            pgoutput_harness::server::Transaction::new().insert(&super::t1(), ["30", "live"]),
        ))
        .unwrap();
    let after = reader.until(end);
    assert_eq!(
        after.len(),
        3,
        "Begin, Insert, Commit (t1's Relation was sent before)"
    );
    assert!(!before.is_empty());
}

/// The test server has no TLS: `prefer` goes on without it, `require` is refused with
/// the reason, never silently downgraded.
#[test]
fn tls_modes_against_a_server_without_tls() {
    let server = server();
    let with = |mode: &str| {
        let conninfo = format!("{} sslmode={mode}", server.connection_string());
        Connection::connect(&ConnInfo::parse(Some(&conninfo), |_| None).unwrap())
    };
    for mode in ["disable", "allow", "prefer"] {
        let conn = with(mode).unwrap_or_else(|e| panic!("sslmode={mode}: {e}"));
        assert!(!conn.is_tls(), "sslmode={mode}");
    }
    for mode in ["require", "verify-ca", "verify-full"] {
        match with(mode) {
            Err(ClientError::Tls(text)) => {
                assert!(
                    text.contains("does not support TLS"),
                    "sslmode={mode}: {text}"
                )
            }
            other => panic!("sslmode={mode}: {other:?}"),
        }
    }
}

#[test]
fn empty_passwords_are_refused_as_postgresql_refuses_them() {
    for auth in [Auth::scram("u", ""), Auth::password("u", "")] {
        let err = TestServer::builder().auth(auth).start().unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert!(
            err.to_string()
                .contains("empty string is not a valid password"),
            "{err}"
        );
    }
    // A stored verifier of the empty password too.
    let verifier = postgres_protocol::password::scram_sha_256(b"");
    let auth = Auth::scram_verifier("u", &verifier).unwrap();
    assert!(TestServer::builder().auth(auth).start().is_err());
    assert!(TestServer::builder()
        .auth(Auth::scram("u", "pw"))
        .start()
        .is_ok());
}
