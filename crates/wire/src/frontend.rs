//! Reading frontend messages (client → server): the untagged start-up packet, then typed
//! messages (a type byte, an Int32 length that counts itself, the body). Every length is
//! checked before anything is buffered for it, so a hostile client cannot make the server
//! allocate more than [`MAX_MESSAGE_LEN`].

use std::fmt;
use std::io::{self, Read};

use super::socket::is_timeout;

/// The largest start-up packet body PostgreSQL accepts (`MAX_STARTUP_PACKET_LENGTH`,
/// which does not count the length field itself).
pub const MAX_STARTUP_LEN: usize = 10_000;
/// The largest typed message this server reads: far above any replication command or
/// status update, far below what would hurt.
pub const MAX_MESSAGE_LEN: usize = 1 << 20;

/// Request codes in the start-up packet's version field.
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
const CANCEL_REQUEST: u32 = 80_877_102;

/// The whole length of a start-up packet from its first four bytes (which count
/// themselves), if PostgreSQL reads it: `ProcessStartupPacket` takes a body of 4 to
/// [`MAX_STARTUP_LEN`] bytes, and for any other length closes the connection without a
/// word to the client (a COMMERROR, only logged: "invalid length of startup packet").
#[must_use]
pub fn startup_packet_len(header: [u8; 4]) -> Option<usize> {
    let len = u32::from_be_bytes(header) as usize;
    (8..=MAX_STARTUP_LEN + 4).contains(&len).then_some(len)
}

/// A StartupMessage's name/value pairs, read as `ProcessStartupPacket` reads them: up to
/// an empty name, which must be the packet's last byte (`None` otherwise, PostgreSQL's
/// "invalid startup packet layout"). The bytes need not be UTF-8 here (PostgreSQL checks
/// the names and values later, where it uses them).
#[must_use]
pub fn startup_parameters(body: &[u8]) -> Option<Vec<(String, String)>> {
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let mut params = Vec::new();
    let mut rest = body;
    loop {
        let name_end = rest.iter().position(|&b| b == 0)?;
        if name_end == 0 {
            // The terminator: the last byte, or the layout is wrong.
            return (rest.len() == 1).then_some(params);
        }
        let value = &rest[name_end + 1..];
        let value_end = value.iter().position(|&b| b == 0)?;
        params.push((text(&rest[..name_end]), text(&value[..value_end])));
        rest = &value[value_end + 1..];
    }
}

/// What a start-up packet asks, from its version field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// SSLRequest.
    Ssl,
    /// GSSENCRequest.
    GssEnc,
    /// CancelRequest.
    Cancel,
    /// A StartupMessage of this protocol version (major in the high 16 bits).
    Startup(u32),
}

impl Request {
    /// The request of a whole start-up packet (at least 8 bytes, as
    /// [`startup_packet_len`] admits).
    #[must_use]
    pub fn of(packet: &[u8]) -> Request {
        let code = packet.get(4..8).map_or(0, |code| {
            u32::from_be_bytes([code[0], code[1], code[2], code[3]])
        });
        match code {
            SSL_REQUEST => Request::Ssl,
            GSSENC_REQUEST => Request::GssEnc,
            CANCEL_REQUEST => Request::Cancel,
            version => Request::Startup(version),
        }
    }

    /// The version field that asked it.
    #[must_use]
    pub fn code(self) -> u32 {
        match self {
            Request::Ssl => SSL_REQUEST,
            Request::GssEnc => GSSENC_REQUEST,
            Request::Cancel => CANCEL_REQUEST,
            Request::Startup(version) => version,
        }
    }
}

/// The first packet of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Startup {
    /// SSLRequest: answered `'N'`, then the real start-up packet follows.
    SslRequest,
    /// GSSENCRequest: answered `'N'` likewise.
    GssEncRequest,
    /// CancelRequest: nothing to cancel here; the connection just closes.
    CancelRequest,
    /// StartupMessage: protocol 3.`minor` and its parameters.
    Params {
        minor: u16,
        params: Vec<(String, String)>,
    },
}

/// A typed frontend message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frontend {
    /// Query `Q`: a simple query (or replication command).
    Query(String),
    /// CopyData `d`.
    CopyData(Vec<u8>),
    /// CopyDone `c`.
    CopyDone,
    /// CopyFail `f`, with its reason.
    CopyFail(String),
    /// Terminate `X`.
    Terminate,
    /// PasswordMessage / SASLInitialResponse / SASLResponse `p`: the body as it is.
    Password(Vec<u8>),
    /// Sync `S` and Flush `H`: nothing to do outside the extended protocol.
    Sync,
    /// Any other message type (the extended query protocol, function calls).
    Other(u8),
}

/// A SASLInitialResponse (the body of a `p` message sent first in a SASL exchange): the
/// mechanism's name and the initial data (`None` for a length of -1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaslInitialResponse<'a> {
    pub mechanism: &'a [u8],
    pub data: Option<&'a [u8]>,
}

/// Reads a SASLInitialResponse as PostgreSQL's `CheckSASLAuth` does (`pq_getmsgrawstring`,
/// `pq_getmsgint`, `pq_getmsgbytes`, `pq_getmsgend`), every length checked against what
/// is there; the error is PostgreSQL's wording (SQLSTATE 08P01).
pub fn sasl_initial_response(body: &[u8]) -> Result<SaslInitialResponse<'_>, &'static str> {
    let nul = body
        .iter()
        .position(|&b| b == 0)
        .ok_or("invalid string in message")?;
    let (mechanism, rest) = (&body[..nul], &body[nul + 1..]);
    let Some((len, rest)) = rest.split_first_chunk::<4>() else {
        return Err("insufficient data left in message");
    };
    let data = match i32::from_be_bytes(*len) {
        -1 => {
            if !rest.is_empty() {
                return Err("invalid message format");
            }
            None
        }
        len => {
            let len = usize::try_from(len).map_err(|_| "insufficient data left in message")?;
            let data = rest.get(..len).ok_or("insufficient data left in message")?;
            if rest.len() != len {
                return Err("invalid message format");
            }
            Some(data)
        }
    };
    Ok(SaslInitialResponse { mechanism, data })
}

impl Frontend {
    /// The message's type byte (`'S'` for Sync and Flush alike).
    pub fn type_byte(&self) -> u8 {
        match self {
            Frontend::Query(_) => b'Q',
            Frontend::CopyData(_) => b'd',
            Frontend::CopyDone => b'c',
            Frontend::CopyFail(_) => b'f',
            Frontend::Terminate => b'X',
            Frontend::Password(_) => b'p',
            Frontend::Sync => b'S',
            Frontend::Other(tag) => *tag,
        }
    }
}

/// Why no message could be read.
#[derive(Debug)]
pub enum ReadError {
    /// The client closed the connection (at a message boundary).
    Closed,
    /// The socket failed.
    Io(io::Error),
    /// The bytes break the protocol; the text says how.
    Malformed(String),
    /// The bytes break the protocol where PostgreSQL closes the connection without a
    /// word to the client (a COMMERROR, only logged); the text says how.
    Unanswered(&'static str),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Closed => f.write_str("the client closed the connection"),
            ReadError::Io(err) => write!(f, "connection: {err}"),
            ReadError::Malformed(what) => f.write_str(what),
            ReadError::Unanswered(what) => f.write_str(what),
        }
    }
}

/// Buffered reading of frontend messages from a socket with a read timeout.
#[derive(Debug, Default)]
pub struct FrontendReader {
    buf: Vec<u8>,
}

fn malformed(text: impl Into<String>) -> ReadError {
    ReadError::Malformed(text.into())
}

/// Splits NUL-terminated strings off `body`.
fn cstr(body: &mut &[u8]) -> Result<String, ReadError> {
    let end = body
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| malformed("invalid string in message: missing NUL terminator"))?;
    let text = String::from_utf8(body[..end].to_vec())
        .map_err(|_| malformed("invalid string in message: not UTF-8"))?;
    *body = &body[end + 1..];
    Ok(text)
}

impl FrontendReader {
    /// Reads more bytes. `Ok(false)` when the read timed out with nothing new.
    fn fill(&mut self, socket: &mut impl Read) -> Result<bool, ReadError> {
        let mut chunk = [0; 8192];
        match socket.read(&mut chunk) {
            Ok(0) if self.buf.is_empty() => Err(ReadError::Closed),
            Ok(0) => Err(malformed(
                "the client closed the connection in the middle of a message",
            )),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(true)
            }
            Err(err) if is_timeout(&err) => Ok(false),
            Err(err) if err.kind() == io::ErrorKind::ConnectionReset => Err(ReadError::Closed),
            Err(err) => Err(ReadError::Io(err)),
        }
    }

    /// The start-up packet, or `None` if it has not fully arrived within the socket's
    /// read timeout.
    pub fn startup(&mut self, socket: &mut impl Read) -> Result<Option<Startup>, ReadError> {
        loop {
            if let Some(startup) = self.parse_startup()? {
                return Ok(Some(startup));
            }
            if !self.fill(socket)? {
                return Ok(None);
            }
        }
    }

    fn parse_startup(&mut self) -> Result<Option<Startup>, ReadError> {
        let Some(len) = self.buf.get(..4) else {
            return Ok(None);
        };
        let Some(len) = startup_packet_len(len.try_into().expect("4 bytes")) else {
            return Err(ReadError::Unanswered("invalid length of startup packet"));
        };
        if self.buf.len() < len {
            return Ok(None);
        }
        let packet: Vec<u8> = self.buf.drain(..len).collect();
        let startup = match Request::of(&packet) {
            Request::Ssl => Startup::SslRequest,
            Request::GssEnc => Startup::GssEncRequest,
            Request::Cancel => Startup::CancelRequest,
            Request::Startup(code) if code >> 16 == 3 => Startup::Params {
                minor: (code & 0xffff) as u16,
                params: startup_parameters(&packet[8..]).ok_or_else(|| {
                    malformed("invalid startup packet layout: expected terminator as last byte")
                })?,
            },
            Request::Startup(code) => {
                return Err(malformed(format!(
                    "unsupported frontend protocol {}.{}: server supports 3.0 to 3.0",
                    code >> 16,
                    code & 0xffff
                )))
            }
        };
        Ok(Some(startup))
    }

    /// The next typed message, or `None` if none has fully arrived within the socket's
    /// read timeout.
    pub fn next(&mut self, socket: &mut impl Read) -> Result<Option<Frontend>, ReadError> {
        loop {
            if let Some(message) = self.parse()? {
                return Ok(Some(message));
            }
            if !self.fill(socket)? {
                return Ok(None);
            }
        }
    }

    fn parse(&mut self) -> Result<Option<Frontend>, ReadError> {
        let Some(header) = self.buf.get(..5) else {
            return Ok(None);
        };
        let tag = header[0];
        let len = u32::from_be_bytes(header[1..5].try_into().expect("4 bytes")) as usize;
        if !(4..=MAX_MESSAGE_LEN).contains(&len) {
            return Err(malformed(format!(
                "invalid message length {len} for message type {:?}",
                char::from(tag)
            )));
        }
        if self.buf.len() < len + 1 {
            return Ok(None);
        }
        let packet: Vec<u8> = self.buf.drain(..len + 1).collect();
        let mut body = &packet[5..];
        let message = match tag {
            b'Q' => {
                let text = cstr(&mut body)?;
                if !body.is_empty() {
                    return Err(malformed(
                        "invalid Query message: bytes after the query string",
                    ));
                }
                Frontend::Query(text)
            }
            b'd' => Frontend::CopyData(body.to_vec()),
            b'c' => Frontend::CopyDone,
            b'f' => Frontend::CopyFail(cstr(&mut body).unwrap_or_default()),
            b'X' => Frontend::Terminate,
            b'p' => Frontend::Password(body.to_vec()),
            b'S' | b'H' => Frontend::Sync,
            other => Frontend::Other(other),
        };
        Ok(Some(message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use postgres_protocol::message::frontend;

    fn read_all(bytes: &[u8]) -> (FrontendReader, Vec<u8>) {
        (FrontendReader::default(), bytes.to_vec())
    }

    /// What postgres-protocol's client side writes, we read back.
    #[test]
    fn reads_what_clients_write() {
        let mut out = BytesMut::new();
        frontend::startup_message([("user", "u"), ("replication", "database")], &mut out).unwrap();
        frontend::query("IDENTIFY_SYSTEM", &mut out).unwrap();
        frontend::copy_done(&mut out);
        frontend::terminate(&mut out);
        let (mut reader, bytes) = read_all(&out);
        let mut input = &bytes[..];
        assert_eq!(
            reader.startup(&mut input).unwrap(),
            Some(Startup::Params {
                minor: 0,
                params: vec![
                    ("user".into(), "u".into()),
                    ("replication".into(), "database".into())
                ]
            })
        );
        assert_eq!(
            reader.next(&mut input).unwrap(),
            Some(Frontend::Query("IDENTIFY_SYSTEM".into()))
        );
        assert_eq!(reader.next(&mut input).unwrap(), Some(Frontend::CopyDone));
        assert_eq!(reader.next(&mut input).unwrap(), Some(Frontend::Terminate));
        assert!(matches!(reader.next(&mut input), Err(ReadError::Closed)));
    }

    #[test]
    fn sasl_initial_responses_are_read_with_every_length_checked() {
        let response = |len: i32, data: &[u8]| {
            let mut body = b"SCRAM-SHA-256\0".to_vec();
            body.extend_from_slice(&len.to_be_bytes());
            body.extend_from_slice(data);
            body
        };
        let ok = response(3, b"abc");
        assert_eq!(
            sasl_initial_response(&ok),
            Ok(SaslInitialResponse {
                mechanism: b"SCRAM-SHA-256",
                data: Some(b"abc")
            })
        );
        assert_eq!(
            sasl_initial_response(&response(-1, b"")).unwrap().data,
            None
        );
        assert_eq!(
            sasl_initial_response(&response(4, b"abc")),
            Err("insufficient data left in message")
        );
        assert_eq!(
            sasl_initial_response(&response(i32::MAX, b"abc")),
            Err("insufficient data left in message")
        );
        assert_eq!(
            sasl_initial_response(&response(-2, b"")),
            Err("insufficient data left in message")
        );
        assert_eq!(
            sasl_initial_response(&response(2, b"abc")),
            Err("invalid message format")
        );
        assert_eq!(
            sasl_initial_response(b"SCRAM-SHA-256\0\0\0"),
            Err("insufficient data left in message")
        );
        assert_eq!(
            sasl_initial_response(b"SCRAM-SHA-256"),
            Err("invalid string in message")
        );
    }

    #[test]
    fn hostile_lengths_are_refused_before_buffering() {
        let mut reader = FrontendReader::default();
        let mut input: &[u8] = b"Q\xff\xff\xff\xff";
        assert!(matches!(
            reader.next(&mut input),
            Err(ReadError::Malformed(_))
        ));
        let mut reader = FrontendReader::default();
        let mut input: &[u8] = b"\x00\x00\x00\x04";
        assert!(matches!(
            reader.startup(&mut input),
            Err(ReadError::Unanswered(_))
        ));
        let mut reader = FrontendReader::default();
        let mut input: &[u8] = b"Q\x00\x00\x00\x06ab";
        assert!(matches!(
            reader.next(&mut input),
            Err(ReadError::Malformed(_))
        ));
    }

    #[test]
    fn a_start_up_packet_may_hold_a_body_of_4_to_10000_bytes() {
        let len = |n: u32| startup_packet_len(n.to_be_bytes());
        assert_eq!((len(7), len(8)), (None, Some(8)));
        // The limit is the body's: the length field's 4 bytes come on top.
        assert_eq!((len(10_004), len(10_005)), (Some(10_004), None));
        assert_eq!(Request::of(&[0, 0, 0, 8, 4, 210, 22, 47]), Request::Ssl);
        assert_eq!(
            Request::of(&[0, 0, 0, 8, 0, 3, 0, 0]),
            Request::Startup(196_608)
        );
        assert_eq!(Request::Ssl.code(), 80_877_103);
    }

    #[test]
    fn startup_parameters_end_at_a_terminator_that_is_the_last_byte() {
        let pairs = |body: &[u8]| startup_parameters(body);
        assert_eq!(
            pairs(b"user\0repl\0replication\0database\0\0"),
            Some(vec![
                ("user".to_owned(), "repl".to_owned()),
                ("replication".to_owned(), "database".to_owned())
            ])
        );
        assert_eq!(pairs(b"\0"), Some(vec![]));
        // A name without its value, bytes after the terminator, no terminator at all.
        for body in [&b"user\0"[..], b"user\0u\0\0x", b"user\0u\0", b""] {
            assert_eq!(pairs(body), None, "{body:?}");
        }
    }
}
