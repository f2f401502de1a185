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
    /// Reading or writing the socket failed.
    Io(io::Error),
}

impl ClientError {
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
            ClientError::Io(err) => write!(f, "connection: {err}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Connect { source, .. } | ClientError::Io(source) => Some(source),
            _ => None,
        }
    }
}

impl From<io::Error> for ClientError {
    fn from(err: io::Error) -> Self {
        ClientError::Io(err)
    }
}
