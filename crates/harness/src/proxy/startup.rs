//! A client's first packets, before any message has a type byte: SSLRequest (answered
//! `S` when the proxy has a certificate, then the TLS handshake; else `N`, as PostgreSQL
//! without one answers), GSSENCRequest (`N`), CancelRequest (passed to the upstream on a
//! connection of its own), and the StartupMessage, whose bytes go to the upstream
//! unchanged.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use pgoutput_wire::error::{error, sqlstate, unsupported_protocol, SqlError};

/// `MAX_STARTUP_PACKET_LENGTH` in PostgreSQL's `pqcomm.h`.
const MAX_STARTUP_PACKET: usize = 10_000;
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
const CANCEL_REQUEST: u32 = 80_877_102;

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
}

impl First {
    /// A start-up parameter's value.
    pub(super) fn parameter(&self, name: &str) -> Option<&str> {
        match self {
            First::Startup { parameters, .. } => parameters
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str()),
            First::Cancel(_) | First::Tls => None,
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
        let len = u32::from_be_bytes(header) as usize;
        if !(8..=MAX_STARTUP_PACKET).contains(&len) {
            return Err(error(
                sqlstate::PROTOCOL_VIOLATION,
                "invalid length of startup packet",
            ));
        }
        let mut bytes = vec![0; len];
        bytes[..4].copy_from_slice(&header);
        if client.read_exact(&mut bytes[4..]).await.is_err() {
            return Ok(None);
        }
        let code = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        match code {
            SSL_REQUEST if !asked.ssl && offer_tls => {
                if client.write_all(b"S").await.is_err() {
                    return Ok(None);
                }
                return Ok(Some(First::Tls));
            }
            // Refused (`N`): the other may come next, then the start-up.
            SSL_REQUEST if !asked.ssl => {
                asked = Asked {
                    ssl: true,
                    gss: false,
                };
                if client.write_all(b"N").await.is_err() {
                    return Ok(None);
                }
            }
            GSSENC_REQUEST if !asked.gss => {
                asked = Asked {
                    ssl: false,
                    gss: true,
                };
                if client.write_all(b"N").await.is_err() {
                    return Ok(None);
                }
            }
            // Asked again: read as a protocol version, which no server supports.
            SSL_REQUEST | GSSENC_REQUEST => return Err(unsupported_protocol(code, major)),
            CANCEL_REQUEST => return Ok(Some(First::Cancel(bytes))),
            _ => {
                let parameters = parameters(&bytes[8..]);
                return Ok(Some(First::Startup { bytes, parameters }));
            }
        }
    }
}

/// The NUL-terminated name/value pairs of a StartupMessage (what does not parse is
/// left to the upstream to refuse).
fn parameters(body: &[u8]) -> Vec<(String, String)> {
    let mut strings = body
        .split(|b| *b == 0)
        .map(|s| String::from_utf8_lossy(s).into_owned());
    let mut pairs = Vec::new();
    while let (Some(name), Some(value)) = (strings.next(), strings.next()) {
        if name.is_empty() {
            break;
        }
        pairs.push((name, value));
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::parameters;

    #[test]
    fn startup_parameters_are_read_up_to_the_terminator() {
        let body = b"user\0repl\0replication\0database\0\0";
        assert_eq!(
            parameters(body),
            [
                ("user".to_owned(), "repl".to_owned()),
                ("replication".to_owned(), "database".to_owned())
            ]
        );
    }
}
