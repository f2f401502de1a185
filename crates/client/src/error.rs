//! What can go wrong on a replication connection.

use std::fmt;
use std::io;

/// An ErrorResponse from the server, with the fields people act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    /// `ERROR`, `FATAL` or `PANIC`.
    pub severity: String,
    /// The SQLSTATE, such as `42704` for an undefined object.
    pub code: String,
    /// The primary message.
    pub message: String,
    /// The optional detail.
    pub detail: Option<String>,
    /// The optional hint.
    pub hint: Option<String>,
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} (SQLSTATE {})",
            self.severity, self.message, self.code
        )?;
        if let Some(detail) = &self.detail {
            write!(f, "; {detail}")?;
        }
        Ok(())
    }
}

/// Why a client operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// The connection string or environment is unusable (the text says what to fix).
    Config(String),
    /// Connecting to `target` failed.
    Connect {
        /// `host:port` or the socket path.
        target: String,
        /// What the operating system said.
        source: io::Error,
    },
    /// Authentication could not proceed on the client side: no password given, no
    /// supported mechanism offered, or the server's SCRAM proof was wrong.
    Auth(String),
    /// TLS could not be set up as the connection string asks: the server offers none,
    /// its certificate fails the checks, or a certificate or key file is unusable.
    Tls(String),
    /// The server answered with an ErrorResponse.
    Server(ServerError),
    /// The server sent something the protocol does not allow here.
    Protocol(String),
    /// The server closed the connection.
    Closed,
    /// The server sent nothing for this long, not even an answer to a status update
    /// asking for one (the consumer's receive timeout): the connection is taken for
    /// dead, as PostgreSQL's walreceiver takes it after `wal_receiver_timeout`.
    Silent(std::time::Duration),
    /// A CopyData frame of the stream does not decode.
    Decode {
        /// The XLogData position of the frame, when the envelope decoded.
        lsn: Option<pgoutput_codec::Lsn>,
        /// What is wrong with it, and where.
        source: pgoutput_codec::DecodeError,
    },
    /// Reading or writing the socket failed.
    Io(io::Error),
}

impl ClientError {
    /// Whether the failure is the kind that passes, worth reconnecting after: the
    /// connection or the server went away, or fell silent; the server is starting or shutting down
    /// (SQLSTATE class 57), has a connection exception (08) or too many connections (53);
    /// or the slot is still held by a walsender that has not noticed its client is gone
    /// (55006). Configuration, authentication and protocol errors do not pass.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Closed
            | ClientError::Silent(_)
            | ClientError::Io(_)
            | ClientError::Connect { .. } => true,
            ClientError::Server(err) => {
                err.code.starts_with("57")
                    || err.code.starts_with("08")
                    || err.code.starts_with("53")
                    || err.code == pgoutput_wire::sqlstate::OBJECT_IN_USE
            }
            _ => false,
        }
    }

    /// The server's error, when that is what this is.
    #[must_use]
    pub fn server_error(&self) -> Option<&ServerError> {
        match self {
            ClientError::Server(err) => Some(err),
            _ => None,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Config(text) => f.write_str(text),
            ClientError::Connect { target, source } => write!(f, "{target}: {source}"),
            ClientError::Auth(text) => write!(f, "authentication: {text}"),
            ClientError::Tls(text) => write!(f, "TLS: {text}"),
            ClientError::Server(err) => write!(f, "server error: {err}"),
            ClientError::Protocol(text) => write!(f, "protocol violation: {text}"),
            ClientError::Closed => f.write_str("the server closed the connection"),
            ClientError::Silent(after) => write!(
                f,
                "the server sent nothing for {after:?}, not even an answer to a status update asking for one: the connection is taken for dead"
            ),
            ClientError::Decode {
                lsn: Some(lsn),
                source,
            } => write!(f, "the message at {lsn} does not decode: {source}"),
            ClientError::Decode { lsn: None, source } => {
                write!(f, "a replication frame does not decode: {source}")
            }
            ClientError::Io(err) => write!(f, "connection: {err}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Connect { source, .. } | ClientError::Io(source) => Some(source),
            ClientError::Decode { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<io::Error> for ClientError {
    fn from(err: io::Error) -> Self {
        ClientError::Io(err)
    }
}
