//! A client's first packets, before any message has a type byte: SSLRequest (answered
//! `S` when the proxy has a certificate, then the TLS handshake; else `N`, as PostgreSQL
//! without one answers), GSSENCRequest (`N`), CancelRequest (passed to the upstream on a
//! connection of its own), and the StartupMessage, whose bytes go to the upstream
//! unchanged.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use pgoutput_wire::error::{unsupported_protocol, SqlError};
use pgoutput_wire::frontend::{startup_packet_len, startup_parameters, Request};

/// What a client opened with.
#[derive(Debug)]
pub(super) enum First {
    /// A StartupMessage (any protocol version: the upstream answers for it): its bytes,
    /// and its parameters.
    Startup {
        bytes: Vec<u8>,
        parameters: Vec<(String, String)>,
    },
    /// A CancelRequest's bytes.
    Cancel(Vec<u8>),
    /// An SSLRequest answered `S`: the TLS handshake comes next, then the first packets
    /// again over it.
    Tls,
    /// A packet PostgreSQL closes the connection on without a word (a length it does
    /// not read): what it logs.
    Unanswered(&'static str),
}

impl First {
    /// A start-up parameter's value.
    pub(super) fn parameter(&self, name: &str) -> Option<&str> {
        match self {
            First::Startup { parameters, .. } => parameters
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str()),
            First::Cancel(_) | First::Tls | First::Unanswered(_) => None,
        }
    }
}

/// Which encryption requests a client has been answered already: each may come once,
/// and the other after a refusal, as `ProcessStartupPacket` allows.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Asked {
    ssl: bool,
    gss: bool,
}

impl Asked {
    /// Over TLS: neither may come again.
    pub(super) const TLS: Asked = Asked {
        ssl: true,
        gss: true,
    };
}

/// Reads the client's first packets up to its StartupMessage or CancelRequest, or an
/// SSLRequest the proxy accepts (`offer_tls`); `Ok(None)` when it leaves first. A packet
/// PostgreSQL would refuse gets PostgreSQL's FATAL (worded for an upstream of major
/// version `major`).
pub(super) async fn read(
    client: &mut (impl AsyncRead + AsyncWrite + Unpin),
    offer_tls: bool,
    mut asked: Asked,
    major: u32,
) -> Result<Option<First>, SqlError> {
    loop {
        let mut header = [0u8; 4];
        if client.read_exact(&mut header).await.is_err() {
            return Ok(None);
        }
        let Some(len) = startup_packet_len(header) else {
            return Ok(Some(First::Unanswered("invalid length of startup packet")));
        };
        let mut bytes = vec![0; len];
        bytes[..4].copy_from_slice(&header);
        if client.read_exact(&mut bytes[4..]).await.is_err() {
            return Ok(None);
        }
        let request = Request::of(&bytes);
        match request {
            Request::Ssl if !asked.ssl && offer_tls => {
                if client.write_all(b"S").await.is_err() {
                    return Ok(None);
                }
                return Ok(Some(First::Tls));
            }
            // Refused (`N`): the other may come next, then the start-up.
            Request::Ssl if !asked.ssl => {
                asked = Asked {
                    ssl: true,
                    gss: false,
                };
                if client.write_all(b"N").await.is_err() {
                    return Ok(None);
                }
            }
            Request::GssEnc if !asked.gss => {
                asked = Asked {
                    ssl: false,
                    gss: true,
                };
                if client.write_all(b"N").await.is_err() {
                    return Ok(None);
                }
            }
            // Asked again: read as a protocol version, which no server supports.
            Request::Ssl | Request::GssEnc => {
                return Err(unsupported_protocol(request.code(), major))
            }
            Request::Cancel => return Ok(Some(First::Cancel(bytes))),
            Request::Startup(_) => {
                // What does not parse is the upstream's to refuse, in its words.
                let parameters = startup_parameters(&bytes[8..]).unwrap_or_default();
                return Ok(Some(First::Startup { bytes, parameters }));
            }
        }
    }
}
