//! A minimal logical-replication client: just enough of the frontend/backend protocol to
//! start a walsender stream over the server's Unix socket (trust authentication), read its
//! CopyData payloads and send ours back. The payloads themselves are the codec's business.

use std::fmt;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// What went wrong talking to the walsender.
#[derive(Debug)]
pub enum WalsenderError {
    /// The socket failed or timed out.
    Io(io::Error),
    /// The server sent an ErrorResponse.
    Server(String),
    /// The server sent something this client does not expect.
    Protocol(String),
}

impl fmt::Display for WalsenderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalsenderError::Io(err) => write!(f, "walsender I/O: {err}"),
            WalsenderError::Server(message) => write!(f, "walsender error: {message}"),
            WalsenderError::Protocol(message) => write!(f, "walsender protocol: {message}"),
        }
    }
}

impl std::error::Error for WalsenderError {}

impl From<io::Error> for WalsenderError {
    fn from(err: io::Error) -> Self {
        WalsenderError::Io(err)
    }
}

/// A connection in logical walsender mode (`replication=database`).
pub struct ReplicationStream {
    socket: UnixStream,
}

impl fmt::Debug for ReplicationStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReplicationStream")
    }
}

fn put_cstr(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(s.as_bytes());
    buf.push(0);
}

/// The human-readable parts of an ErrorResponse body: severity, code, message.
fn error_text(body: &[u8]) -> String {
    body.split(|&b| b == 0)
        .filter(|field| matches!(field.first(), Some(b'S' | b'C' | b'M')))
        .map(|field| String::from_utf8_lossy(&field[1..]).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

impl ReplicationStream {
    /// Connects to the server listening on `socket_dir` / `port` as `user` to `database`.
    pub fn connect(
        socket_dir: &Path,
        port: u16,
        user: &str,
        database: &str,
    ) -> Result<Self, WalsenderError> {
        let socket = UnixStream::connect(socket_dir.join(format!(".s.PGSQL.{port}")))?;
        socket.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut stream = ReplicationStream { socket };
        let mut body = Vec::new();
        body.extend_from_slice(&196_608u32.to_be_bytes()); // protocol 3.0
        for (key, value) in [
            ("user", user),
            ("database", database),
            ("replication", "database"),
        ] {
            put_cstr(&mut body, key);
            put_cstr(&mut body, value);
        }
        body.push(0);
        let mut startup = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        startup.extend_from_slice(&body);
        stream.socket.write_all(&startup)?;
        loop {
            let (tag, body) = stream.read_message()?;
            match tag {
                b'R' if body.get(..4) == Some(&[0, 0, 0, 0]) => {}
                b'R' => {
                    return Err(WalsenderError::Protocol(
                        "the server asked for a password; the test servers use trust".into(),
                    ))
                }
                b'S' | b'K' | b'N' => {}
                b'Z' => return Ok(stream),
                other => return Err(unexpected(other, &body)),
            }
        }
    }

    /// Reads one backend message: its type byte and body. ErrorResponse becomes an error.
    fn read_message(&mut self) -> Result<(u8, Vec<u8>), WalsenderError> {
        let mut header = [0; 5];
        self.socket.read_exact(&mut header)?;
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        if !(4..=1 << 30).contains(&len) {
            return Err(WalsenderError::Protocol(format!("message length {len}")));
        }
        let mut body = vec![0; len - 4];
        self.socket.read_exact(&mut body)?;
        if header[0] == b'E' {
            return Err(WalsenderError::Server(error_text(&body)));
        }
        Ok((header[0], body))
    }

    fn send(&mut self, tag: u8, body: &[u8]) -> Result<(), WalsenderError> {
        let mut message = Vec::with_capacity(body.len() + 5);
        message.push(tag);
        message.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        message.extend_from_slice(body);
        self.socket.write_all(&message)?;
        Ok(())
    }

    /// `START_REPLICATION SLOT slot LOGICAL start (options)`; waits for CopyBothResponse.
    pub fn start_replication(
        &mut self,
        slot: &str,
        start: &str,
        options: &[(&str, &str)],
    ) -> Result<(), WalsenderError> {
        let options: Vec<String> = options.iter().map(|(k, v)| format!("{k} '{v}'")).collect();
        let mut query = Vec::new();
        put_cstr(
            &mut query,
            &format!(
                "START_REPLICATION SLOT {slot} LOGICAL {start} ({})",
                options.join(", ")
            ),
        );
        self.send(b'Q', &query)?;
        loop {
            match self.read_message()? {
                (b'W', _) => return Ok(()),
                (b'N', _) => {}
                (tag, body) => return Err(unexpected(tag, &body)),
            }
        }
    }

    /// The next CopyData payload (XLogData or keepalive), skipping notices.
    pub fn next_copy_data(&mut self) -> Result<Vec<u8>, WalsenderError> {
        loop {
            match self.read_message()? {
                (b'd', payload) => return Ok(payload),
                (b'N', _) => {}
                (tag, body) => return Err(unexpected(tag, &body)),
            }
        }
    }

    /// Sends a CopyData (a standby status update, say).
    pub fn send_copy_data(&mut self, payload: &[u8]) -> Result<(), WalsenderError> {
        self.send(b'd', payload)
    }

    /// Ends the stream: CopyDone, then reads until the server's ReadyForQuery, returning the
    /// CopyData payloads that were still in flight.
    pub fn finish(mut self) -> Result<Vec<Vec<u8>>, WalsenderError> {
        self.send(b'c', &[])?;
        let mut late = Vec::new();
        loop {
            match self.read_message()? {
                (b'd', payload) => late.push(payload),
                (b'c' | b'C' | b'N', _) => {}
                (b'Z', _) => return Ok(late),
                (tag, body) => return Err(unexpected(tag, &body)),
            }
        }
    }
}

fn unexpected(tag: u8, body: &[u8]) -> WalsenderError {
    WalsenderError::Protocol(format!(
        "unexpected message {:?} with {} bytes",
        tag as char,
        body.len()
    ))
}
