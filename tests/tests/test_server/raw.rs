//! A client that speaks the protocol by hand, to send exactly the bytes a test wants and
//! see exactly what comes back: to a real PostgreSQL (over its socket) or to the test
//! server (over TCP).

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use pgoutput_codec::Lsn;

/// Where to connect.
#[derive(Clone)]
pub(crate) enum Target {
    Postgres(PathBuf),
    Ours(SocketAddr),
}

impl Target {
    /// A real server, over its Unix socket.
    pub(crate) fn of(pg: &pgoutput_tests::pg::Server) -> Target {
        Target::Postgres(pg.socket_dir().join(format!(".s.PGSQL.{}", pg.port())))
    }
}

pub(crate) trait Socket: Read + Write + Send {}
impl<T: Read + Write + Send> Socket for T {}

/// A client that speaks the protocol by hand, to send exactly the bytes a test wants.
pub(crate) struct Raw {
    socket: Box<dyn Socket>,
    buf: Vec<u8>,
}

/// A message from the server.
#[derive(Debug, Clone)]
pub(crate) struct Msg {
    pub(crate) tag: u8,
    pub(crate) body: Vec<u8>,
}

/// How a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The server closed it (FIN).
    Eof,
    /// The server reset it (RST).
    Reset,
    /// It was still open.
    TimedOut,
}

/// How a read ended.
#[derive(Debug, PartialEq)]
pub(crate) enum Read1 {
    Msg(u8, Vec<u8>),
    TimedOut,
    Closed,
}

impl Msg {
    /// The ErrorResponse/NoticeResponse field `code`.
    pub(crate) fn field(&self, code: u8) -> String {
        let mut rest = &self.body[..];
        while let Some((&c, tail)) = rest.split_first() {
            if c == 0 {
                break;
            }
            let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
            if c == code {
                return String::from_utf8_lossy(&tail[..end]).into_owned();
            }
            rest = &tail[(end + 1).min(tail.len())..];
        }
        String::new()
    }

    /// What is compared: the type, and for errors and notices severity, SQLSTATE,
    /// the message, and the detail and hint where there are any, with their numbers
    /// (process ids) left out.
    pub(crate) fn summary(&self) -> String {
        match self.tag {
            b'E' | b'N' => {
                // Each number (a process id's digits vary) as one '#'.
                let without_numbers = |text: String| {
                    let mut out = String::new();
                    for c in text.chars() {
                        if !c.is_ascii_digit() {
                            out.push(c);
                        } else if !out.ends_with('#') {
                            out.push('#');
                        }
                    }
                    out
                };
                let mut summary = format!(
                    "{} {} {} {}",
                    char::from(self.tag),
                    self.field(b'V'),
                    self.field(b'C'),
                    without_numbers(self.field(b'M'))
                );
                for (code, name) in [(b'D', "DETAIL"), (b'H', "HINT")] {
                    let text = self.field(code);
                    if !text.is_empty() {
                        summary.push_str(&format!(" {name}: {}", without_numbers(text)));
                    }
                }
                summary
            }
            tag => char::from(tag).to_string(),
        }
    }
}

pub(crate) fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    out.extend_from_slice(body);
    out
}

pub(crate) fn startup_packet(user: &str) -> Vec<u8> {
    startup_packet_to(user, "postgres")
}

/// A logical walsender's start-up packet for `user` and `database`.
pub(crate) fn startup_packet_to(user: &str, database: &str) -> Vec<u8> {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    for (k, v) in [
        ("user", user),
        ("database", database),
        ("replication", "database"),
    ] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut out = (body.len() as u32 + 4).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

pub(crate) fn query(text: &str) -> Vec<u8> {
    let mut body = text.as_bytes().to_vec();
    body.push(0);
    message(b'Q', &body)
}

/// A standby status update confirming `lsn`, with `extra` bytes after its fields.
pub(crate) fn status_update(lsn: Lsn, extra: usize) -> Vec<u8> {
    let mut body = vec![b'r'];
    for _ in 0..3 {
        body.extend_from_slice(&lsn.0.to_be_bytes());
    }
    body.extend_from_slice(&0i64.to_be_bytes());
    body.push(0);
    body.extend(std::iter::repeat_n(0xAB, extra));
    message(b'd', &body)
}

impl Raw {
    pub(crate) fn connect(target: &Target) -> Raw {
        let socket: Box<dyn Socket> = match target {
            Target::Postgres(path) => {
                let s = UnixStream::connect(path).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                Box::new(s)
            }
            Target::Ours(addr) => {
                let s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                Box::new(s)
            }
        };
        Raw {
            socket,
            buf: Vec::new(),
        }
    }

    /// Connected and logged in (trust) as `user`.
    pub(crate) fn login(target: &Target, user: &str) -> Raw {
        let mut raw = Raw::connect(target);
        raw.send(&startup_packet(user));
        let answer = raw.until_ready(Duration::from_secs(10));
        assert!(
            answer.iter().all(|m| m.tag != b'E'),
            "login failed: {answer:?}"
        );
        raw
    }

    /// Every byte until the connection ends or `timeout` passes (what was read ahead
    /// first), each chunk with when it came, and how it ended.
    pub(crate) fn bytes_until_end(&mut self, timeout: Duration) -> (Vec<(Instant, Vec<u8>)>, End) {
        let deadline = Instant::now() + timeout;
        let mut chunks = Vec::new();
        if !self.buf.is_empty() {
            chunks.push((Instant::now(), std::mem::take(&mut self.buf)));
        }
        loop {
            if Instant::now() >= deadline {
                return (chunks, End::TimedOut);
            }
            let mut chunk = [0; 65536];
            match self.socket.read(&mut chunk) {
                Ok(0) => return (chunks, End::Eof),
                Ok(n) => chunks.push((Instant::now(), chunk[..n].to_vec())),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return (chunks, End::Reset),
                Err(e) => panic!("read failed: {e}"),
            }
        }
    }

    pub(crate) fn send(&mut self, bytes: &[u8]) {
        // A closed connection shows in what is read next.
        let _ = self.socket.write_all(bytes);
    }

    /// The next message, waiting at most `timeout`.
    pub(crate) fn read(&mut self, timeout: Duration) -> Read1 {
        let deadline = Instant::now() + timeout;
        loop {
            if self.buf.len() >= 5 {
                let len = u32::from_be_bytes(self.buf[1..5].try_into().unwrap()) as usize;
                if self.buf.len() > len {
                    let tag = self.buf[0];
                    let body = self.buf[5..=len].to_vec();
                    self.buf.drain(..=len);
                    return Read1::Msg(tag, body);
                }
            }
            if Instant::now() >= deadline {
                return Read1::TimedOut;
            }
            let mut chunk = [0; 65536];
            match self.socket.read(&mut chunk) {
                Ok(0) => return Read1::Closed,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Read1::Closed,
            }
        }
    }

    /// Messages up to ReadyForQuery (or until the connection closes, then `X`), without
    /// the start-up's ParameterStatus, BackendKeyData and AuthenticationOk, and without
    /// CopyData.
    pub(crate) fn until_ready(&mut self, timeout: Duration) -> Vec<Msg> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        loop {
            match self.read(deadline.saturating_duration_since(Instant::now())) {
                Read1::Msg(tag, body) => {
                    let done = tag == b'Z';
                    if !matches!(tag, b'S' | b'K' | b'R' | b'd') {
                        out.push(Msg { tag, body });
                    }
                    if done {
                        return out;
                    }
                }
                Read1::Closed => {
                    out.push(Msg {
                        tag: b'X',
                        body: Vec::new(),
                    });
                    return out;
                }
                Read1::TimedOut => panic!("no ReadyForQuery in {timeout:?}: {out:?}"),
            }
        }
    }

    pub(crate) fn query(&mut self, text: &str) -> Vec<Msg> {
        self.send(&query(text));
        self.until_ready(Duration::from_secs(10))
    }

    /// START_REPLICATION, up to the CopyBothResponse (or the error).
    pub(crate) fn start(&mut self, slot: &str, lsn: &str, publications: &str) -> Vec<Msg> {
        self.send(&query(&format!(
            "START_REPLICATION SLOT {slot} LOGICAL {lsn} (proto_version '1', publication_names '{publications}')"
        )));
        let mut out = Vec::new();
        loop {
            match self.read(Duration::from_secs(10)) {
                Read1::Msg(tag, body) => {
                    out.push(Msg { tag, body });
                    if matches!(tag, b'W' | b'Z') {
                        return out;
                    }
                }
                other => panic!("START_REPLICATION: {other:?} after {out:?}"),
            }
        }
    }

    /// Everything until the connection closes or `timeout` passes: the messages other
    /// than CopyData, whether a keepalive asked for a reply, and whether it closed.
    pub(crate) fn drain(&mut self, timeout: Duration) -> Drained {
        let deadline = Instant::now() + timeout;
        let mut drained = Drained::default();
        loop {
            match self.read(deadline.saturating_duration_since(Instant::now())) {
                Read1::Msg(b'd', body) => drained.copy_data(&body),
                Read1::Msg(tag, body) => drained.messages.push(Msg { tag, body }),
                Read1::Closed => {
                    drained.closed = true;
                    return drained;
                }
                Read1::TimedOut => return drained,
            }
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Drained {
    pub(crate) messages: Vec<Msg>,
    pub(crate) reply_requested: bool,
    pub(crate) keepalive_ends: Vec<Lsn>,
    pub(crate) begins: usize,
    pub(crate) closed: bool,
}

impl Drained {
    pub(crate) fn copy_data(&mut self, body: &[u8]) {
        match body.first() {
            Some(b'k') if body.len() >= 18 => {
                self.keepalive_ends
                    .push(Lsn(u64::from_be_bytes(body[1..9].try_into().unwrap())));
                self.reply_requested |= body[17] == 1;
            }
            Some(b'w') if body.get(25) == Some(&b'B') => self.begins += 1,
            _ => {}
        }
    }

    pub(crate) fn summary(&self) -> Vec<String> {
        let mut out: Vec<String> = self.messages.iter().map(Msg::summary).collect();
        if self.closed {
            out.push("closed".into());
        }
        out
    }
}

pub(crate) fn summaries(messages: &[Msg]) -> Vec<String> {
    messages.iter().map(Msg::summary).collect()
}
