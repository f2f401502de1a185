//! A logical replication connection: connection strings, sockets, start-up and
//! authentication (password, MD5, SCRAM-SHA-256), simple queries and copy-both mode.
//! Messages are framed and parsed by `postgres-protocol`; pgoutput itself is the codec's
//! business. `pgoutput tail` and the live conformance tests both connect through it.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256, SCRAM_SHA_256};
use postgres_protocol::message::backend::{ErrorResponseBody, Header, Message};
use postgres_protocol::message::frontend;

/// Where and as whom to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnInfo {
    /// A host name, or a directory holding the server's Unix socket (starts with `/`).
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Option<String>,
    pub dbname: String,
}

impl ConnInfo {
    /// Parses `key=value` pairs (`host`, `port`, `user`, `password`, `dbname`; values may
    /// be single-quoted) or a `postgresql://user:password@host:port/dbname` URI; the usual
    /// `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE` fill in what it leaves out.
    pub fn parse(
        conninfo: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        match conninfo.map(str::trim) {
            Some(uri) if uri.starts_with("postgresql://") || uri.starts_with("postgres://") => {
                let rest = uri.split_once("://").map(|(_, r)| r).unwrap_or_default();
                let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
                let (userinfo, hostport) = match authority.rsplit_once('@') {
                    Some((u, h)) => (Some(u), h),
                    None => (None, authority),
                };
                if let Some(userinfo) = userinfo {
                    let (user, password) = userinfo
                        .split_once(':')
                        .map_or((userinfo, None), |(u, p)| (u, Some(p)));
                    pairs.push(("user".into(), user.into()));
                    if let Some(password) = password {
                        pairs.push(("password".into(), password.into()));
                    }
                }
                let (host, port) = hostport
                    .rsplit_once(':')
                    .map_or((hostport, None), |(h, p)| (h, Some(p)));
                if !host.is_empty() {
                    pairs.push(("host".into(), host.into()));
                }
                if let Some(port) = port {
                    pairs.push(("port".into(), port.into()));
                }
                let dbname = path.split('?').next().unwrap_or_default();
                if !dbname.is_empty() {
                    pairs.push(("dbname".into(), dbname.into()));
                }
            }
            Some(text) => pairs = parse_key_values(text)?,
            None => {}
        }
        let get = |key: &str, var: &str| {
            pairs
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .or_else(|| env(var))
        };
        let user = get("user", "PGUSER")
            .or_else(|| env("USER"))
            .ok_or("no user: give user= or set PGUSER")?;
        let host = get("host", "PGHOST").unwrap_or_else(|| {
            if Path::new("/var/run/postgresql").is_dir() {
                "/var/run/postgresql".into()
            } else {
                "localhost".into()
            }
        });
        let port = match get("port", "PGPORT") {
            Some(port) => port.parse().map_err(|_| format!("invalid port {port:?}"))?,
            None => 5432,
        };
        let password = get("password", "PGPASSWORD");
        let dbname = get("dbname", "PGDATABASE").unwrap_or_else(|| user.clone());
        for (key, _) in &pairs {
            if !["host", "port", "user", "password", "dbname"].contains(&key.as_str()) {
                return Err(format!("unsupported connection option {key:?}; expected host, port, user, password or dbname"));
            }
        }
        Ok(ConnInfo {
            host,
            port,
            user,
            password,
            dbname,
        })
    }
}

/// `key=value key2='quoted value'`.
fn parse_key_values(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let key: String =
            std::iter::from_fn(|| chars.next_if(|c| *c != '=' && !c.is_whitespace())).collect();
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(format!(
                "invalid connection string: expected '=' after {key:?}"
            ));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\\') => value.extend(chars.next()),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                    None => return Err("invalid connection string: unterminated quote".into()),
                }
            }
        } else {
            value.extend(std::iter::from_fn(|| chars.next_if(|c| !c.is_whitespace())));
        }
        pairs.push((key, value));
    }
}

#[derive(Debug)]
enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Socket {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_read_timeout(timeout),
            Socket::Unix(s) => s.set_read_timeout(timeout),
        }
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.read(buf),
            Socket::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write(buf),
            Socket::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.flush(),
            Socket::Unix(s) => s.flush(),
        }
    }
}

/// A backend message: postgres-protocol's, or the CopyBothResponse it does not know.
enum Backend {
    Message(Message),
    CopyBothResponse,
}

/// What arrived in copy-both mode.
#[derive(Debug)]
pub enum CopyEvent {
    /// A CopyData payload.
    Data(Vec<u8>),
    /// Nothing within the poll interval.
    Idle,
    /// The server ended the stream.
    End,
}

/// A connection in logical walsender mode.
#[derive(Debug)]
pub struct Connection {
    socket: Socket,
    input: BytesMut,
}

fn server_error(body: &ErrorResponseBody) -> String {
    let mut fields = body.fields();
    let mut parts = Vec::new();
    while let Ok(Some(field)) = fields.next() {
        if matches!(field.type_(), b'S' | b'C' | b'M' | b'D') {
            parts.push(String::from_utf8_lossy(field.value_bytes()).into_owned());
        }
    }
    format!("server error: {}", parts.join(" "))
}

fn io_error(err: io::Error) -> String {
    format!("connection: {err}")
}

impl Connection {
    /// Connects, starts a logical replication session and authenticates.
    pub fn connect(info: &ConnInfo) -> Result<Connection, String> {
        let socket = if info.host.starts_with('/') {
            let path = Path::new(&info.host).join(format!(".s.PGSQL.{}", info.port));
            UnixStream::connect(&path)
                .map(Socket::Unix)
                .map_err(|e| format!("{}: {e}", path.display()))?
        } else {
            TcpStream::connect((info.host.as_str(), info.port))
                .map(Socket::Tcp)
                .map_err(|e| format!("{}:{}: {e}", info.host, info.port))?
        };
        let mut conn = Connection {
            socket,
            input: BytesMut::with_capacity(64 * 1024),
        };
        let mut out = BytesMut::new();
        let params = [
            ("user", info.user.as_str()),
            ("database", info.dbname.as_str()),
            ("replication", "database"),
            ("application_name", "pgoutput tail"),
            ("client_encoding", "UTF8"),
        ];
        frontend::startup_message(params.iter().copied(), &mut out).map_err(io_error)?;
        conn.send(&out)?;
        let password = || {
            info.password.as_deref().ok_or_else(|| {
                "the server asks for a password: give password= or set PGPASSWORD".to_owned()
            })
        };
        let mut scram: Option<ScramSha256> = None;
        loop {
            let mut out = BytesMut::new();
            match conn.recv()? {
                Message::AuthenticationOk => {}
                Message::AuthenticationCleartextPassword => {
                    frontend::password_message(password()?.as_bytes(), &mut out)
                        .map_err(io_error)?;
                }
                Message::AuthenticationMd5Password(body) => {
                    let hash = md5_hash(info.user.as_bytes(), password()?.as_bytes(), body.salt());
                    frontend::password_message(hash.as_bytes(), &mut out).map_err(io_error)?;
                }
                Message::AuthenticationSasl(body) => {
                    let mut mechanisms = body.mechanisms();
                    let mut offered = false;
                    while let Some(mechanism) = mechanisms.next().map_err(io_error)? {
                        offered |= mechanism == SCRAM_SHA_256;
                    }
                    if !offered {
                        return Err("the server offers no SASL mechanism this tool supports (SCRAM-SHA-256)".into());
                    }
                    let client =
                        ScramSha256::new(password()?.as_bytes(), ChannelBinding::unsupported());
                    frontend::sasl_initial_response(SCRAM_SHA_256, client.message(), &mut out)
                        .map_err(io_error)?;
                    scram = Some(client);
                }
                Message::AuthenticationSaslContinue(body) => {
                    let client = scram.as_mut().ok_or("SASL continue without SASL")?;
                    client
                        .update(body.data())
                        .map_err(|e| format!("SCRAM: {e}"))?;
                    frontend::sasl_response(client.message(), &mut out).map_err(io_error)?;
                }
                Message::AuthenticationSaslFinal(body) => {
                    let client = scram.as_mut().ok_or("SASL final without SASL")?;
                    client
                        .finish(body.data())
                        .map_err(|e| format!("SCRAM: the server's proof is wrong: {e}"))?;
                }
                Message::ReadyForQuery(_) => return Ok(conn),
                Message::ErrorResponse(body) => return Err(server_error(&body)),
                Message::ParameterStatus(_)
                | Message::BackendKeyData(_)
                | Message::NoticeResponse(_) => {}
                _ => return Err("unexpected message during start-up".into()),
            }
            if !out.is_empty() {
                conn.send(&out)?;
            }
        }
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.socket.write_all(bytes).map_err(io_error)
    }

    /// The next complete message in the input buffer, if there is one.
    ///
    /// postgres-protocol parses every backend message but CopyBothResponse (`'W'`), which
    /// only replication uses; that one is recognised from its header here.
    fn parse(&mut self) -> Result<Option<Backend>, String> {
        if let Some(header) = Header::parse(&self.input).map_err(io_error)? {
            if header.tag() == b'W' {
                let total = header.len() as usize + 1;
                if self.input.len() < total {
                    return Ok(None);
                }
                let _ = self.input.split_to(total);
                return Ok(Some(Backend::CopyBothResponse));
            }
        }
        Ok(Message::parse(&mut self.input)
            .map_err(io_error)?
            .map(Backend::Message))
    }

    /// The next message, waiting as long as it takes.
    fn recv_any(&mut self) -> Result<Backend, String> {
        self.socket.set_read_timeout(None).map_err(io_error)?;
        loop {
            if let Some(message) = self.parse()? {
                return Ok(message);
            }
            if !self.fill()? {
                return Err("the server closed the connection".into());
            }
        }
    }

    /// The next message other than CopyBothResponse.
    fn recv(&mut self) -> Result<Message, String> {
        match self.recv_any()? {
            Backend::Message(message) => Ok(message),
            Backend::CopyBothResponse => Err("unexpected CopyBothResponse".into()),
        }
    }

    /// Reads more bytes; `false` at end of stream.
    fn fill(&mut self) -> Result<bool, String> {
        let mut chunk = [0; 16 * 1024];
        loop {
            match self.socket.read(&mut chunk) {
                Ok(n) => {
                    self.input.extend_from_slice(&chunk[..n]);
                    return Ok(n > 0);
                }
                // A signal (Ctrl-C) interrupted the read: nothing was lost, read again.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_error(e)),
            }
        }
    }

    /// Runs a replication command and returns the rows of its result, as text.
    pub fn simple_query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        let mut out = BytesMut::new();
        frontend::query(sql, &mut out).map_err(io_error)?;
        self.send(&out)?;
        let mut rows = Vec::new();
        let mut error = None;
        loop {
            match self.recv()? {
                Message::DataRow(body) => {
                    let buffer = body.buffer();
                    let mut ranges = body.ranges();
                    let mut row = Vec::new();
                    while let Some(range) = ranges.next().map_err(io_error)? {
                        row.push(range.map(|r| String::from_utf8_lossy(&buffer[r]).into_owned()));
                    }
                    rows.push(row);
                }
                Message::ErrorResponse(body) => error = Some(server_error(&body)),
                Message::ReadyForQuery(_) => return error.map_or(Ok(rows), Err),
                _ => {}
            }
        }
    }

    /// Sends START_REPLICATION and waits for copy-both mode.
    pub fn start_replication(&mut self, command: &str) -> Result<(), String> {
        let mut out = BytesMut::new();
        frontend::query(command, &mut out).map_err(io_error)?;
        self.send(&out)?;
        loop {
            let message = match self.recv_any()? {
                Backend::CopyBothResponse => return Ok(()),
                Backend::Message(message) => message,
            };
            match message {
                Message::ErrorResponse(body) => {
                    let error = server_error(&body);
                    // Drain to ReadyForQuery so the connection stays consistent.
                    while !matches!(self.recv()?, Message::ReadyForQuery(_)) {}
                    return Err(error);
                }
                Message::NoticeResponse(_) => {}
                _ => return Err("unexpected reply to START_REPLICATION".into()),
            }
        }
    }

    /// The next CopyData payload, or `Idle` when none arrives within `wait`.
    pub fn poll_copy_data(&mut self, wait: Duration) -> Result<CopyEvent, String> {
        loop {
            if let Some(message) = self.parse()? {
                let Backend::Message(message) = message else {
                    continue;
                };
                match message {
                    Message::CopyData(body) => return Ok(CopyEvent::Data(body.data().to_vec())),
                    Message::CopyDone | Message::CommandComplete(_) | Message::ReadyForQuery(_) => {
                        return Ok(CopyEvent::End)
                    }
                    Message::ErrorResponse(body) => return Err(server_error(&body)),
                    _ => continue,
                }
            }
            self.socket.set_read_timeout(Some(wait)).map_err(io_error)?;
            let mut chunk = [0; 64 * 1024];
            match self.socket.read(&mut chunk) {
                Ok(0) => return Ok(CopyEvent::End),
                Ok(n) => self.input.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        // Nothing arrived in time, or a signal (Ctrl-C) interrupted the
                        // wait: let the caller look at its clock and its stop flag.
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    return Ok(CopyEvent::Idle)
                }
                Err(e) => return Err(io_error(e)),
            }
        }
    }

    /// Sends a CopyData payload (a standby status update).
    pub fn send_copy_data(&mut self, payload: &[u8]) -> Result<(), String> {
        let mut out = BytesMut::new();
        frontend::CopyData::new(payload)
            .map_err(io_error)?
            .write(&mut out);
        self.send(&out)
    }

    /// Ends copy-both mode and waits for the server to finish (its ReadyForQuery), ignoring
    /// data still in flight.
    pub fn finish_copy(&mut self) -> Result<(), String> {
        let mut out = BytesMut::new();
        frontend::copy_done(&mut out);
        self.send(&out)?;
        loop {
            match self.recv()? {
                Message::ReadyForQuery(_) => return Ok(()),
                Message::ErrorResponse(body) => return Err(server_error(&body)),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn key_value_strings() {
        let info = ConnInfo::parse(
            Some("host=/tmp/pg port=5499 user=tailer password='se cret' dbname=app"),
            env(&[]),
        )
        .unwrap();
        assert_eq!(
            info,
            ConnInfo {
                host: "/tmp/pg".into(),
                port: 5499,
                user: "tailer".into(),
                password: Some("se cret".into()),
                dbname: "app".into()
            }
        );
    }

    #[test]
    fn uris_and_environment() {
        let info = ConnInfo::parse(Some("postgresql://u:p@db.example:6000/app"), env(&[])).unwrap();
        assert_eq!(
            (
                info.host.as_str(),
                info.port,
                info.user.as_str(),
                info.password.as_deref(),
                info.dbname.as_str()
            ),
            ("db.example", 6000, "u", Some("p"), "app")
        );
        let info = ConnInfo::parse(
            None,
            env(&[
                ("PGHOST", "h"),
                ("PGPORT", "7"),
                ("PGUSER", "x"),
                ("PGPASSWORD", "y"),
            ]),
        )
        .unwrap();
        assert_eq!(
            (
                info.host.as_str(),
                info.port,
                info.user.as_str(),
                info.dbname.as_str()
            ),
            ("h", 7, "x", "x")
        );
        assert!(ConnInfo::parse(Some("sslmode=require user=x"), env(&[])).is_err());
        assert!(ConnInfo::parse(Some("host"), env(&[])).is_err());
    }
}
