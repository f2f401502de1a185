//! The HTTP/JSON plumbing the control APIs share (`pgoutput serve --control`, `pgoutput
//! proxy --control`): one request per connection (`Connection: close`), each on a thread
//! of its own so that a `POST /wait` holds no one up; `GET /` lists the endpoints; errors
//! are `{"error": "…"}` with a 4xx status. What each API answers lives with what it
//! controls ([`server`](crate::server)'s and [`proxy`](crate::proxy)'s `control.rs`).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::confirmed::Timeout;
use crate::faults::Fault;
use crate::judge::{Fact, Finding, Probe};
use pgoutput_codec::Lsn;

/// The most a request's head may take, and its body (a body's bytes are read only once
/// its length is known to be no more).
const MAX_HEAD: usize = 16 * 1024;
const MAX_BODY: usize = 1024 * 1024;
/// How long a client may take to send its whole request: one deadline, however the bytes
/// trickle in.
const REQUEST_DEADLINE: Duration = Duration::from_secs(30);
/// How many requests are answered at once; more get 503 at once.
const MAX_REQUESTS: usize = 64;
/// The longest `POST /wait` may ask to wait.
pub(crate) const MAX_WAIT_MS: u64 = 10 * 60 * 1000;
/// How long the accept loop waits after a failed accept (out of file descriptors, say)
/// before it tries again, rather than spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// A running control API. Dropping it stops it.
#[derive(Debug)]
pub struct Control {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Control {
    /// Serves `api` on `addr`, which must be a loopback address
    /// unless `remote` says otherwise (the API can crash the server and read what its
    /// clients did: it is for a test machine, not a network).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a non-loopback address without `remote`, else the error of
    /// binding the socket.
    pub(crate) fn serve(api: Arc<dyn Api>, addr: SocketAddr, remote: bool) -> io::Result<Control> {
        if !addr.ip().is_loopback() && !remote {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the control API listens on loopback only ({addr} is not), unless told to listen elsewhere"),
            ));
        }
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let busy = Arc::new(AtomicUsize::new(0));
        let accept = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("pgoutput-control".into())
                .spawn(move || {
                    for stream in listener.incoming() {
                        if stop.load(Ordering::SeqCst) {
                            return;
                        }
                        let Ok(mut stream) = stream else {
                            std::thread::sleep(ACCEPT_BACKOFF);
                            continue;
                        };
                        if busy.fetch_add(1, Ordering::SeqCst) >= MAX_REQUESTS {
                            busy.fetch_sub(1, Ordering::SeqCst);
                            let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
                            let _ = reply(
                                &mut stream,
                                Answer(503, json!({ "error": format!("more than {MAX_REQUESTS} requests at once") })),
                            );
                            continue;
                        }
                        let api = Arc::clone(&api);
                        let done = Arc::clone(&busy);
                        let spawned = std::thread::Builder::new()
                            .name("pgoutput-control-request".into())
                            .spawn(move || {
                                answer(&*api, stream, addr);
                                done.fetch_sub(1, Ordering::SeqCst);
                            });
                        if spawned.is_err() {
                            busy.fetch_sub(1, Ordering::SeqCst);
                        }
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
pub(crate) struct Request {
    pub method: String,
    pub path: String,
    pub body: Vec<u8>,
    /// The `Origin` and `Host` headers, which tell a browser's request.
    pub origin: Option<String>,
    pub host: Option<String>,
}

impl Request {
    /// The path without its query, split at `/`.
    pub(crate) fn segments(&self) -> Vec<&str> {
        let path = self.path.split('?').next().unwrap_or_default();
        path.trim_matches('/').split('/').collect()
    }
}

/// An answer: status and JSON.
pub(crate) struct Answer(pub u16, pub Value);

/// 400 with the reason.
pub(crate) fn bad(text: impl Into<String>) -> Answer {
    Answer(400, json!({ "error": text.into() }))
}

/// What an API serves: the fault rules and the wait every API has, its own endpoints
/// (for `GET /`), and an answer to each of its own requests.
pub(crate) trait Api: Send + Sync + 'static {
    /// Its own endpoints beyond [`SHARED_ENDPOINTS`] (`"POST /events"`) and what each does.
    fn endpoints(&self) -> &'static [(&'static str, &'static str)];

    /// The answer to one of its own requests; `None` for a path the API does not have.
    fn route(&self, request: &Request) -> Option<Answer>;

    /// The fault rules, each with how often it fired.
    fn faults(&self) -> Vec<(Fault, u64)>;

    /// Arms a rule [`Fault::check`] accepted.
    fn add_fault(&self, fault: Fault);

    /// Disarms every rule.
    fn clear_faults(&self);

    /// Waits until `slot` is confirmed at `lsn` or beyond.
    fn wait_for_confirmed_flush(
        &self,
        slot: &str,
        lsn: Lsn,
        timeout: Duration,
    ) -> Result<Lsn, Timeout>;

    /// Where `POST /wait` waits when it names no position: the test server's WAL end,
    /// the highest position the proxy sent the slot's clients.
    fn default_wait_lsn(&self, slot: &str) -> Lsn;

    /// The judge's findings and facts, by slot.
    fn findings(&self) -> Vec<(String, Finding)>;
    fn facts(&self) -> Vec<(String, Fact)>;

    /// The judge's probe, and arming or disarming it.
    fn probe(&self) -> Option<Probe>;
    fn set_probe(&self, probe: Option<Probe>);

    /// Gives `slot` a state a test asked for; `false` when the API knows no such slot.
    fn set_slot_state(&self, slot: &str, state: SlotState) -> bool;
}

/// A state a test gives a slot: what START_REPLICATION of it gets from then on, in
/// PostgreSQL's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotState {
    /// 55000, as for a slot PostgreSQL invalidated.
    Invalidated,
    /// 55006 ("active for PID …") for this long after its client leaves (from now if
    /// none streams it).
    Held(Duration),
    /// 42704, as for a slot that does not exist.
    Missing,
}

/// The endpoints every API has.
const SHARED_ENDPOINTS: [(&str, &str); 12] = [
    ("GET /faults", "the fault rules, each with how often it fired"),
    ("POST /faults", "arm a rule, or an array of rules"),
    ("DELETE /faults", "disarm every rule"),
    (
        "POST /wait",
        "{\"slot\", \"lsn\", \"timeout_ms\"}: wait until the slot is confirmed there (without lsn: the WAL end; 408 on timeout)",
    ),
    (
        "GET /findings",
        "what each slot's consumer did wrong, judged across its connections: [{\"finding\", \"slot\", \"connection\", …, \"text\"}]",
    ),
    (
        "GET /facts",
        "what happened on each slot: streams started (the position asked for), how each ended, crashes, transactions sent again",
    ),
    ("GET /probe", "the judge's probe, or null"),
    (
        "POST /probe",
        "{\"every\": 1, \"after\": 1, \"wait_ms\": 1000}: hold one transaction in every after its first change(s) and ask for a reply; ask at each WAL end caught up with",
    ),
    ("DELETE /probe", "disarm the probe"),
    (
        "POST /slots/:name/invalidate",
        "START_REPLICATION of the slot gets 55000, as for a slot PostgreSQL invalidated",
    ),
    (
        "POST /slots/:name/hold",
        "{\"ms\": N}: START_REPLICATION of the slot gets 55006 (active for PID …) that long after its client leaves",
    ),
    (
        "DELETE /slots/:name",
        "START_REPLICATION of the slot gets 42704 (the test server drops it; the proxy answers so, and the real slot stays)",
    ),
];

/// Every endpoint of `api`.
fn endpoints(api: &dyn Api) -> impl Iterator<Item = &(&'static str, &'static str)> {
    SHARED_ENDPOINTS.iter().chain(api.endpoints())
}

/// The requests every API answers alike.
fn shared_route(api: &dyn Api, request: &Request) -> Option<Answer> {
    Some(
        match (request.method.as_str(), request.segments().as_slice()) {
            ("GET", ["faults"]) => Answer(
                200,
                Value::Array(
                    api.faults()
                        .into_iter()
                        .map(|(rule, fired)| json!({ "rule": rule, "fired": fired }))
                        .collect(),
                ),
            ),
            ("POST", ["faults"]) => add_faults(api, &request.body),
            ("DELETE", ["faults"]) => {
                api.clear_faults();
                Answer(200, json!({}))
            }
            ("POST", ["wait"]) => wait(api, &request.body),
            ("GET", ["findings"]) => Answer(200, judged(api.findings(), "text")),
            ("GET", ["facts"]) => Answer(200, judged(api.facts(), "text")),
            ("GET", ["probe"]) => Answer(200, json!(api.probe())),
            ("POST", ["probe"]) => {
                let body: &[u8] = if request.body.is_empty() {
                    b"{}"
                } else {
                    &request.body
                };
                match serde_json::from_slice::<Probe>(body) {
                    Ok(probe) => {
                        api.set_probe(Some(probe));
                        Answer(200, json!(probe))
                    }
                    Err(e) => bad(format!(
                        "the body must be {{\"every\": N, \"after\": N, \"wait_ms\": N}} (each optional): {e}"
                    )),
                }
            }
            ("POST", ["slots", name, "invalidate"]) => {
                slot_state(api, name, SlotState::Invalidated)
            }
            ("POST", ["slots", name, "hold"]) => {
                #[derive(Deserialize)]
                #[serde(deny_unknown_fields)]
                struct Hold {
                    ms: u64,
                }
                match serde_json::from_slice::<Hold>(&request.body) {
                    Ok(hold) => {
                        slot_state(api, name, SlotState::Held(Duration::from_millis(hold.ms)))
                    }
                    Err(e) => bad(format!("the body must be {{\"ms\": N}}: {e}")),
                }
            }
            ("DELETE", ["slots", name]) => slot_state(api, name, SlotState::Missing),
            ("DELETE", ["probe"]) => {
                api.set_probe(None);
                Answer(200, json!({}))
            }
            _ => return None,
        },
    )
}

/// A slot state set: `{}`, or 404 for a slot the API does not know.
fn slot_state(api: &dyn Api, slot: &str, state: SlotState) -> Answer {
    if api.set_slot_state(slot, state) {
        Answer(200, json!({}))
    } else {
        Answer(
            404,
            json!({ "error": pgoutput_wire::error::slot_missing(slot).message }),
        )
    }
}

/// `GET /` lists the endpoints; a known path with another method is 405, an unknown one
/// 404.
fn dispatch(api: &dyn Api, request: &Request) -> Answer {
    let segments = request.segments();
    if request.method == "GET" && segments == [""] {
        let endpoints: serde_json::Map<String, Value> = endpoints(api)
            .map(|(endpoint, what)| ((*endpoint).to_owned(), Value::from(*what)))
            .collect();
        return Answer(200, json!({ "endpoints": endpoints }));
    }
    if let Some(answer) = shared_route(api, request).or_else(|| api.route(request)) {
        return answer;
    }
    let path = request.path.split('?').next().unwrap_or_default();
    let known = endpoints(api).any(|(endpoint, _)| {
        let pattern = endpoint.split_once(' ').map_or("", |(_, p)| p);
        let pattern: Vec<&str> = pattern.trim_matches('/').split('/').collect();
        pattern.len() == segments.len()
            && pattern
                .iter()
                .zip(&segments)
                .all(|(p, s)| p.starts_with(':') || p == s)
    });
    if known {
        Answer(
            405,
            json!({ "error": format!("{} {path} is not part of the API", request.method) }),
        )
    } else {
        Answer(
            404,
            json!({ "error": format!("no {path} here: GET / lists the endpoints") }),
        )
    }
}

fn answer(api: &dyn Api, mut stream: TcpStream, addr: SocketAddr) {
    let answer = match read_request(&mut stream, Instant::now() + REQUEST_DEADLINE) {
        Ok(request) => match refused_browser(&request, addr) {
            Some(refusal) => refusal,
            None => dispatch(api, &request),
        },
        Err(refusal) => refusal,
    };
    let _ = stream.set_write_timeout(Some(REQUEST_DEADLINE));
    let _ = reply(&mut stream, answer);
}

/// A request a web page may have made: it carries `Origin` (a browser's cross-origin
/// request, or any POST from a page), or a `Host` that is neither an IP address nor
/// `localhost` (a name rebound to this address). The API crashes servers and shows what
/// their clients did: a page a developer opens must not reach it, as toxiproxy refuses.
fn refused_browser(request: &Request, addr: SocketAddr) -> Option<Answer> {
    if let Some(origin) = &request.origin {
        return Some(Answer(
            403,
            json!({ "error": format!("requests from web pages are refused (Origin: {origin})") }),
        ));
    }
    let host = request.host.as_deref()?;
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    let known = name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok();
    (!known).then(|| {
        Answer(
            403,
            json!({ "error": format!("Host {host:?} is not this API's address ({addr}) or localhost") }),
        )
    })
}

fn reply(stream: &mut TcpStream, Answer(status, body): Answer) -> io::Result<()> {
    let body = body.to_string();
    let reason = match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        404 => "Not Found",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        503 => "Service Unavailable",
        _ => "Bad Request",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())
}

/// Reads one request by `deadline`, with `httparse` for its head and `Content-Length` for
/// its body, which is read only if it is no longer than [`MAX_BODY`].
fn read_request(stream: &mut TcpStream, deadline: Instant) -> Result<Request, Answer> {
    let mut read = |into: &mut [u8]| -> Result<usize, Answer> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Answer(
                408,
                json!({ "error": "the request took too long to arrive" }),
            ));
        }
        let _ = stream.set_read_timeout(Some(left));
        stream.read(into).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Answer(
                408,
                json!({ "error": "the request took too long to arrive" }),
            ),
            _ => bad(format!("reading the request: {e}")),
        })
    };
    let mut buf = Vec::new();
    let mut chunk = [0; 4096];
    let head_len = loop {
        let n = read(&mut chunk)?;
        if n == 0 {
            return Err(bad("the request ended early"));
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => break len,
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
            Ok(httparse::Status::Partial) => return Err(bad("the request's head is too long")),
            Err(e) => return Err(bad(format!("not an HTTP request: {e}"))),
        }
    };
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut request = httparse::Request::new(&mut headers);
    request
        .parse(&buf)
        .map_err(|e| bad(format!("not an HTTP request: {e}")))?;
    let header = |name: &str| {
        request
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).into_owned())
    };
    let (origin, host) = (header("origin"), header("host"));
    let length = match header("content-length") {
        Some(text) => text
            .trim()
            .parse::<u64>()
            .map_err(|_| bad("Content-Length is not a number"))?,
        None => 0,
    };
    if length > MAX_BODY as u64 {
        return Err(Answer(
            413,
            json!({ "error": format!("a body of {length} bytes is more than the {MAX_BODY} allowed") }),
        ));
    }
    let length = length as usize;
    let method = request.method.unwrap_or_default().to_owned();
    let path = request.path.unwrap_or_default().to_owned();
    let mut body = buf.split_off(head_len);
    while body.len() < length {
        let n = read(&mut chunk[..(length - body.len()).min(4096)])?;
        if n == 0 {
            return Err(bad("the body ended early"));
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(length);
    Ok(Request {
        method,
        path,
        body,
        origin,
        host,
    })
}

/// `POST /faults`: a rule or an array of rules, each checked before any is armed.
fn add_faults(api: &dyn Api, body: &[u8]) -> Answer {
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
        api.add_fault(fault);
    }
    Answer(201, json!({ "armed": armed }))
}

/// Findings or facts as JSON: each with its slot (and its text, under `text`).
fn judged<T: serde::Serialize + std::fmt::Display>(items: Vec<(String, T)>, text: &str) -> Value {
    Value::Array(
        items
            .into_iter()
            .map(|(slot, item)| {
                let mut value = json!(item);
                value["slot"] = Value::from(slot);
                value[text] = Value::from(item.to_string());
                value
            })
            .collect(),
    )
}

/// The body of `POST /wait`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wait {
    slot: String,
    #[serde(default)]
    lsn: Option<Lsn>,
    #[serde(default = "default_wait")]
    timeout_ms: u64,
}

fn default_wait() -> u64 {
    10_000
}

/// `POST /wait`: the confirmed position once the slot reaches it, or 408.
fn wait(api: &dyn Api, body: &[u8]) -> Answer {
    let wait: Wait = match serde_json::from_slice(body) {
        Ok(wait) => wait,
        Err(e) => {
            return bad(format!(
                "the body must be {{\"slot\": \"s\", \"lsn\": \"0/0\", \"timeout_ms\": N}}: {e}"
            ))
        }
    };
    if wait.timeout_ms > MAX_WAIT_MS {
        return bad(format!(
            "timeout_ms {} is more than the {MAX_WAIT_MS} a wait may take",
            wait.timeout_ms
        ));
    }
    let lsn = wait.lsn.unwrap_or_else(|| api.default_wait_lsn(&wait.slot));
    match api.wait_for_confirmed_flush(&wait.slot, lsn, Duration::from_millis(wait.timeout_ms)) {
        Ok(lsn) => Answer(200, json!({ "confirmed_flush_lsn": lsn })),
        Err(timeout) => Answer(
            408,
            json!({ "error": timeout.to_string(), "confirmed_flush_lsn": timeout.confirmed_flush_lsn }),
        ),
    }
}
