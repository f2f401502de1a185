//! The control API guards itself as toxiproxy does: a request a web page could make (with
//! `Origin`, or a `Host` that names another site rebound to loopback) is refused, a body
//! past 1 MiB is refused from its length without being read, and a wait longer than the
//! cap is refused.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use pgoutput_harness::server::TestServer;
use pgoutput_harness::Control;

use super::{publication, script};

fn control() -> (Arc<TestServer>, Control) {
    let server = Arc::new(
        TestServer::builder()
            .publication(publication())
            .script(script())
            .start()
            .unwrap(),
    );
    let control =
        Control::start(Arc::clone(&server), "127.0.0.1:0".parse().unwrap(), false).unwrap();
    (server, control)
}

/// Sends `head` (and `body`), reads the whole answer; its status and text.
fn exchange(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    // The API may answer (and close) before the body is sent: that is the point.
    let _ = stream.write_all(body);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"));
    (status, answer)
}

#[test]
fn requests_a_browser_could_make_are_refused() {
    let (_server, control) = control();
    let addr = control.addr();
    let (status, _) = exchange(
        addr,
        &format!("GET /slots HTTP/1.1\r\nHost: {addr}\r\n\r\n"),
        b"",
    );
    assert_eq!(status, 200);
    let (status, _) = exchange(addr, "GET /slots HTTP/1.1\r\nHost: localhost\r\n\r\n", b"");
    assert_eq!(status, 200, "localhost is this machine");
    // A page's POST /crash carries Origin.
    let (status, answer) = exchange(
        addr,
        &format!(
            "POST /crash HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://example.com\r\nUser-Agent: Mozilla/5.0\r\nContent-Length: 0\r\n\r\n"
        ),
        b"",
    );
    assert_eq!(status, 403, "{answer}");
    assert!(
        answer.contains("requests from web pages are refused"),
        "{answer}"
    );
    // DNS rebinding: the page's own name, resolved to 127.0.0.1.
    let (status, answer) = exchange(
        addr,
        &format!(
            "GET /connections HTTP/1.1\r\nHost: attacker.example:{}\r\n\r\n",
            addr.port()
        ),
        b"",
    );
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("is not this API's address"), "{answer}");
}

#[test]
fn a_large_body_is_refused_from_its_length_and_a_long_wait_is_refused() {
    let (_server, control) = control();
    let addr = control.addr();
    // 100 MiB announced; nothing of it sent: the answer comes from the length alone.
    let (status, answer) = exchange(
        addr,
        &format!(
            "POST /events HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n",
            100 * 1024 * 1024
        ),
        b"",
    );
    assert_eq!(status, 413, "{answer}");
    assert!(answer.contains("more than the 1048576 allowed"), "{answer}");
    let body = br#"{"slot": "s", "timeout_ms": 36000000}"#;
    let (status, answer) = exchange(
        addr,
        &format!(
            "POST /wait HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        ),
        body,
    );
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer.contains("is more than the 600000 a wait may take"),
        "{answer}"
    );
}

/// The slot states a test sets over HTTP (the routes the test server and the proxy share):
/// each reaches the slot, an unknown slot is 404 in PostgreSQL's words, a hold needs its
/// `ms`.
#[test]
fn slot_states_are_set_over_http() {
    let (server, control) = control();
    let addr = control.addr();
    let post = |path: &str, method: &str, body: &str| {
        exchange(
            addr,
            &format!(
                "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n",
                body.len()
            ),
            body.as_bytes(),
        )
    };
    let mut conn = pgoutput_client::Connection::connect(
        &pgoutput_client::ConnInfo::parse(Some(&server.connection_string()), |_| None).unwrap(),
    )
    .unwrap();
    for slot in ["a", "b", "c"] {
        conn.simple_query(&format!("CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput"))
            .unwrap();
    }
    assert_eq!(post("/slots/a/invalidate", "POST", "").0, 200);
    assert!(server
        .slots()
        .iter()
        .any(|s| s.name == "a" && s.invalidated));
    assert_eq!(post("/slots/b/hold", "POST", r#"{"ms": 60000}"#).0, 200);
    let (status, answer) = post("/slots/b/hold", "POST", r#"{"seconds": 1}"#);
    assert_eq!(status, 400, "{answer}");
    assert_eq!(post("/slots/c", "DELETE", "").0, 200);
    assert!(server.slots().iter().all(|s| s.name != "c"));
    let (status, answer) = post("/slots/nope/invalidate", "POST", "");
    assert_eq!(status, 404);
    assert!(
        answer.contains(r#"replication slot \"nope\" does not exist"#),
        "{answer}"
    );
    // The held slot refuses START_REPLICATION as PostgreSQL's would.
    let err = conn
        .simple_query(
            "START_REPLICATION SLOT b LOGICAL 0/0 (proto_version '1', publication_names 'p')",
        )
        .unwrap_err();
    assert!(err.to_string().contains("55006"), "{err}");
}
