//! One socket type for TCP, Unix-domain and (with the `tls` feature) TLS connections.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// A connected stream socket: TCP, or a Unix-domain socket (PostgreSQL's
/// `/dir/.s.PGSQL.port`).
#[derive(Debug)]
pub enum Socket {
    /// A TCP connection.
    Tcp(TcpStream),
    /// A Unix-domain socket connection.
    Unix(UnixStream),
    /// A TLS connection over TCP (the client's, after PostgreSQL's SSLRequest).
    #[cfg(feature = "tls")]
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Socket {
    /// Whether the connection is encrypted.
    #[must_use]
    pub fn is_tls(&self) -> bool {
        #[cfg(feature = "tls")]
        if let Socket::Tls(_) = self {
            return true;
        }
        false
    }

    /// How long a read waits before failing with `WouldBlock`/`TimedOut`; `None` waits
    /// forever.
    ///
    /// # Errors
    ///
    /// What the operating system says.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_read_timeout(timeout),
            Socket::Unix(s) => s.set_read_timeout(timeout),
            #[cfg(feature = "tls")]
            Socket::Tls(s) => s.sock.set_read_timeout(timeout),
        }
    }

    /// Shuts down both directions: blocked reads and writes on any handle return.
    ///
    /// # Errors
    ///
    /// What the operating system says.
    pub fn shutdown(&self) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
            Socket::Unix(s) => s.shutdown(std::net::Shutdown::Both),
            #[cfg(feature = "tls")]
            Socket::Tls(s) => s.sock.shutdown(std::net::Shutdown::Both),
        }
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.read(buf),
            Socket::Unix(s) => s.read(buf),
            #[cfg(feature = "tls")]
            Socket::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write(buf),
            Socket::Unix(s) => s.write(buf),
            #[cfg(feature = "tls")]
            Socket::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.flush(),
            Socket::Unix(s) => s.flush(),
            #[cfg(feature = "tls")]
            Socket::Tls(s) => s.flush(),
        }
    }
}

/// Whether a read error only means "nothing arrived in time" (or a signal interrupted
/// the wait): the caller may look at its clock and read again.
pub fn is_timeout(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}
