//! Hostile clients: random bytes, damaged start-up packets, valid sessions with damaged
//! messages. Each ends in an ErrorResponse or a closed connection within a second, no
//! connection thread panics, and a well-behaved client is served byte for byte afterwards.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use pgoutput_harness::server::TestServer;
use postgres_protocol::message::frontend;

use super::{publication, script};

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn valid_session() -> Vec<u8> {
    let mut out = BytesMut::new();
    frontend::startup_message(
        [
            ("user", "u"),
            ("database", "postgres"),
            ("replication", "database"),
        ],
        &mut out,
    )
    .unwrap();
    for query in [
        "IDENTIFY_SYSTEM",
        "CREATE_REPLICATION_SLOT h LOGICAL pgoutput",
        "START_REPLICATION SLOT h LOGICAL 0/0 (proto_version '1', publication_names 'p')",
    ] {
        frontend::query(query, &mut out).unwrap();
    }
    frontend::CopyData::new(
        &b"r\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0\0\0"[..],
    )
    .unwrap()
    .write(&mut out);
    frontend::copy_done(&mut out);
    out.to_vec()
}

static PANICS: AtomicUsize = AtomicUsize::new(0);

#[test]
fn hostile_clients_get_errors_or_a_close_and_never_a_panic() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("pgoutput-test-client"))
        {
            PANICS.fetch_add(1, Ordering::SeqCst);
        }
        previous(info);
    }));
    let server = TestServer::builder()
        .publication(publication())
        .script(script())
        .start()
        .unwrap();
    let valid = valid_session();
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    for case in 0..300 {
        let input = match case % 3 {
            // Random bytes.
            0 => {
                let n = 1 + rng.below(64);
                rng.bytes(n)
            }
            // A valid session with bytes flipped, cut or inserted.
            1 => {
                let mut input = valid.clone();
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(input.len());
                    input[at] ^= 1 << rng.below(8);
                }
                input.truncate(rng.below(input.len()) + 1);
                input
            }
            // A valid start-up, then random typed messages.
            _ => {
                let mut input = valid[..valid[3] as usize].to_vec();
                for _ in 0..1 + rng.below(4) {
                    let tag = *b"QdcfXpSHPBEFDC".get(rng.below(14)).unwrap();
                    let len = rng.below(24);
                    let body = rng.bytes(len);
                    input.push(tag);
                    input.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
                    input.extend_from_slice(&body);
                }
                input
            }
        };
        let mut socket = TcpStream::connect(server.addr()).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let _ = socket.write_all(&input);
        // Half-close: the server sees the end of the input and must finish.
        let _ = socket.shutdown(std::net::Shutdown::Write);
        let started = Instant::now();
        let mut reply = Vec::new();
        let _ = socket.read_to_end(&mut reply);
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "case {case}: the server neither answered nor closed: input {input:02x?}"
        );
    }
    // A well-behaved client still gets its stream.
    let info =
        pgoutput_client::ConnInfo::parse(Some(&server.connection_string()), |_| None).unwrap();
    let mut conn = pgoutput_client::Connection::connect(&info).unwrap();
    assert_eq!(conn.simple_query("IDENTIFY_SYSTEM").unwrap().len(), 1);
    drop(conn);
    drop(server);
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        0,
        "a connection thread panicked"
    );
}
