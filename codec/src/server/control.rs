//! The HTTP/JSON control API of `pgoutput serve --control`: what a test suite in any
//! language (curl is enough) needs to drive the test server: append transactions, arm
//! and clear fault rules, read slots and clients (findings included), wait for a slot to
//! reach a position, checkpoint, crash, shut down, set a slot's state.
//!
//! | request | body | answer |
//! |---|---|---|
//! | `POST /events` | JSON lines, as `--script` | `{"wal_end": "0/1000360"}` |
//! | `GET /faults` | | `[{"rule": {…}, "fired": 0}]` |
//! | `POST /faults` | a rule, or an array of rules (as in `--config`) | `{"armed": 1}` |
//! | `DELETE /faults` | | `{}` |
//! | `GET /slots` | | `[{"name", "confirmed_flush_lsn", "persisted_lsn", "active", …}]` |
//! | `GET /clients` | | `[{"id", "application_name", "sent", "status_updates", "findings", …}]` |
//! | `POST /wait` | `{"slot": "s", "lsn": "0/1000360", "timeout_ms": 5000}` | `{"confirmed_flush_lsn"}`, or 408 |
//! | `POST /checkpoint`, `POST /crash` | | `{}` |
//! | `POST /shutdown` | | 202; PostgreSQL's fast shutdown, then the server stops |
//! | `POST /slots/NAME/invalidate` | | `{}`, or 404 |
//! | `POST /slots/NAME/hold` | `{"ms": 2000}` | `{}`, or 404 |
//! | `DELETE /slots/NAME` | | `{}`, or 404 |
//!
//! Errors are `{"error": "…"}` with a 4xx status. One request per connection
//! (`Connection: close`), each on a thread of its own, so a `POST /wait` holds no one up.

use std::io::{self, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use super::{ClientInfo, Fault, Script, SlotInfo, TestServer};
use crate::Lsn;

/// The most a request's head may take, and its body.
const MAX_HEAD: usize = 16 * 1024;
const MAX_BODY: usize = 64 * 1024 * 1024;
/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A running control API. Dropping it stops it.
#[derive(Debug)]
pub struct Control {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Control {
    /// Serves the control API of `server` on `addr`, which must be a loopback address
    /// unless `remote` says otherwise (the API can crash the server and read what its
    /// clients did: it is for a test machine, not a network).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a non-loopback address without `remote`, else the error of
    /// binding the socket.
    pub fn start(server: Arc<TestServer>, addr: SocketAddr, remote: bool) -> io::Result<Control> {
        if !addr.ip().is_loopback() && !remote {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the control API listens on loopback only ({addr} is not), unless told to listen elsewhere"),
            ));
        }
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("pgoutput-test-control".into())
                .spawn(move || {
                    for stream in listener.incoming() {
                        if stop.load(Ordering::SeqCst) {
                            return;
                        }
                        let Ok(stream) = stream else { continue };
                        let server = Arc::clone(&server);
                        let _ = std::thread::Builder::new()
                            .name("pgoutput-test-control-request".into())
                            .spawn(move || answer(&server, stream));
                    }
                })?
        };
        Ok(Control {
            addr,
            stop,
            accept: Some(accept),
        })
    }

    /// Where it listens.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// A request: method, path and body.
struct Request {
    method: String,
    path: String,
    body: Vec<u8>,
}

/// An answer: status and JSON.
struct Answer(u16, Value);

fn bad(text: impl Into<String>) -> Answer {
    Answer(400, json!({ "error": text.into() }))
}

fn answer(server: &TestServer, mut stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(READ_TIMEOUT));
    let Answer(status, body) = match read_request(&mut stream) {
        Ok(request) => route(server, &request),
        Err(text) => bad(text),
    };
    let body = body.to_string();
    let reason = match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        _ => "Bad Request",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body.as_bytes());
}

/// Reads one request, with `httparse` for its head and `Content-Length` for its body.
fn read_request(stream: &mut TcpStream) -> Result<Request, String> {
    let mut buf = Vec::new();
    let mut chunk = [0; 4096];
    let head_len = loop {
        let n = stream
            .read(&mut chunk)
            .map_err(|e| format!("reading the request: {e}"))?;
        if n == 0 {
            return Err("the request ended early".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => break len,
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
            Ok(httparse::Status::Partial) => return Err("the request's head is too long".into()),
            Err(e) => return Err(format!("not an HTTP request: {e}")),
        }
    };
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut request = httparse::Request::new(&mut headers);
    request
        .parse(&buf)
        .map_err(|e| format!("not an HTTP request: {e}"))?;
    let method = request.method.unwrap_or_default().to_owned();
    let path = request.path.unwrap_or_default().to_owned();
    let length = match request
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
    {
        Some(h) => std::str::from_utf8(h.value)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .ok_or("Content-Length is not a number")?,
        None => 0,
    };
    if length > MAX_BODY {
        return Err(format!(
            "a body of {length} bytes is more than {MAX_BODY} allowed"
        ));
    }
    let mut body = buf.split_off(head_len);
    if body.len() < length {
        let mut rest = vec![0; length - body.len()];
        stream
            .read_exact(&mut rest)
            .map_err(|e| format!("reading the body: {e}"))?;
        body.extend_from_slice(&rest);
    }
    body.truncate(length);
    Ok(Request { method, path, body })
}

fn route(server: &TestServer, request: &Request) -> Answer {
    let path = request.path.split('?').next().unwrap_or_default();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (request.method.as_str(), segments.as_slice()) {
        ("POST", ["events"]) => events(server, &request.body),
        ("GET", ["faults"]) => Answer(
            200,
            Value::Array(
                server
                    .faults()
                    .into_iter()
                    .map(|(rule, fired)| json!({ "rule": rule, "fired": fired }))
                    .collect(),
            ),
        ),
        ("POST", ["faults"]) => add_faults(server, &request.body),
        ("DELETE", ["faults"]) => {
            server.clear_faults();
            Answer(200, json!({}))
        }
        ("GET", ["slots"]) => Answer(200, server.slots().iter().map(slot).collect()),
        ("GET", ["clients"]) => Answer(200, server.clients().iter().map(client).collect()),
        ("POST", ["wait"]) => wait(server, &request.body),
        ("POST", ["checkpoint"]) => {
            server.checkpoint();
            Answer(200, json!({}))
        }
        ("POST", ["crash"]) => {
            server.crash();
            Answer(200, json!({}))
        }
        ("POST", ["shutdown"]) => {
            server.begin_shutdown();
            Answer(202, json!({}))
        }
        ("POST", ["slots", name, "invalidate"]) => found(server.invalidate_slot(name), name),
        ("POST", ["slots", name, "hold"]) => {
            #[derive(Deserialize)]
            #[serde(deny_unknown_fields)]
            struct Hold {
                ms: u64,
            }
            match serde_json::from_slice::<Hold>(&request.body) {
                Ok(hold) => found(server.hold_slot(name, Duration::from_millis(hold.ms)), name),
                Err(e) => bad(format!("the body must be {{\"ms\": N}}: {e}")),
            }
        }
        ("DELETE", ["slots", name]) => found(server.drop_slot(name), name),
        (
            _,
            ["events" | "faults" | "slots" | "clients" | "wait" | "checkpoint" | "crash"
            | "shutdown", ..],
        ) => Answer(
            405,
            json!({ "error": format!("{} {path} is not part of the API", request.method) }),
        ),
        _ => Answer(404, json!({ "error": format!("no {path} here") })),
    }
}

fn found(found: bool, slot: &str) -> Answer {
    if found {
        Answer(200, json!({}))
    } else {
        Answer(
            404,
            json!({ "error": format!("replication slot \"{slot}\" does not exist") }),
        )
    }
}

fn events(server: &TestServer, body: &[u8]) -> Answer {
    let script = match Script::from_json_reader(BufReader::new(body)) {
        Ok(script) => script,
        Err(e) => return bad(e.to_string()),
    };
    match server.append_script(script) {
        Ok(end) => Answer(200, json!({ "wal_end": end })),
        Err(e) => bad(e.to_string()),
    }
}

fn add_faults(server: &TestServer, body: &[u8]) -> Answer {
    let value: Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(e) => return bad(format!("not JSON: {e}")),
    };
    let rules = match value {
        Value::Array(rules) => rules,
        rule => vec![rule],
    };
    let mut faults = Vec::new();
    for rule in rules {
        match serde_json::from_value::<Fault>(rule) {
            Ok(fault) => match fault.check() {
                Ok(()) => faults.push(fault),
                Err(e) => return bad(e.to_string()),
            },
            Err(e) => return bad(format!("not a fault rule: {e}")),
        }
    }
    let armed = faults.len();
    for fault in faults {
        // Checked above.
        let _ = server.add_fault(fault);
    }
    Answer(201, json!({ "armed": armed }))
}

fn wait(server: &TestServer, body: &[u8]) -> Answer {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Wait {
        slot: String,
        lsn: Lsn,
        #[serde(default = "default_wait")]
        timeout_ms: u64,
    }
    fn default_wait() -> u64 {
        10_000
    }
    let wait: Wait = match serde_json::from_slice(body) {
        Ok(wait) => wait,
        Err(e) => {
            return bad(format!(
                "the body must be {{\"slot\": \"s\", \"lsn\": \"0/0\", \"timeout_ms\": N}}: {e}"
            ))
        }
    };
    match server.wait_for_confirmed_flush(
        &wait.slot,
        wait.lsn,
        Duration::from_millis(wait.timeout_ms),
    ) {
        Ok(lsn) => Answer(200, json!({ "confirmed_flush_lsn": lsn })),
        Err(timeout) => Answer(
            408,
            json!({ "error": timeout.to_string(), "confirmed_flush_lsn": timeout.confirmed_flush_lsn }),
        ),
    }
}

fn slot(slot: &SlotInfo) -> Value {
    json!({
        "name": slot.name,
        "confirmed_flush_lsn": slot.confirmed_flush_lsn,
        "persisted_lsn": slot.persisted_lsn,
        "active": slot.active_client.is_some(),
        "active_client": slot.active_client,
        "two_phase": slot.two_phase,
        "invalidated": slot.invalidated,
    })
}

fn client(client: &ClientInfo) -> Value {
    json!({
        "id": client.id,
        "user": client.user,
        "application_name": client.application_name,
        "connected": client.connected,
        "ended": client.ended,
        "commands": client.commands,
        "stream_options": client.stream_options.iter().map(|o| json!({
            "proto_version": o.proto_version.number(),
            "publication_names": o.publication_names,
            "streaming": o.streaming.to_string(),
            "binary": o.binary,
            "messages": o.messages,
            "two_phase": o.two_phase,
        })).collect::<Vec<_>>(),
        "status_updates": client.status_updates.iter().map(|u| json!({
            "write_lsn": u.write_lsn,
            "flush_lsn": u.flush_lsn,
            "apply_lsn": u.apply_lsn,
            "send_time": u.send_time,
            "reply_requested": u.reply_requested,
        })).collect::<Vec<_>>(),
        "sent": client.sent,
        "reply_delays_ms": client.replies.iter().map(Duration::as_millis).collect::<Vec<_>>(),
        "findings": client.findings,
    })
}
