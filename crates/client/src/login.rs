//! Start-up and authentication without I/O: the start-up packet out, then one backend
//! message in and what to answer out, until the first ReadyForQuery. The blocking and the
//! async connection drive the same steps.

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256, SCRAM_SHA_256};
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;

use super::passfile::{self, Lookup};
use super::{protocol, server_error, ClientError, ConnInfo};

/// What to do after a message.
pub(crate) enum Step {
    /// Send these bytes, then wait for the next message.
    Send(BytesMut),
    /// Wait for the next message.
    Wait,
    /// Logged in: the server is ready for queries.
    Done,
}

/// A login in progress.
pub(crate) struct Login<'i> {
    info: &'i ConnInfo,
    scram: Option<ScramSha256>,
}

impl<'i> Login<'i> {
    /// The login, and the start-up packet to send first (a logical walsender session).
    pub(crate) fn start(info: &'i ConnInfo) -> Result<(Login<'i>, BytesMut), ClientError> {
        let mut out = BytesMut::new();
        let mut params = vec![
            ("user", info.user.as_str()),
            ("database", info.dbname.as_str()),
            ("replication", "database"),
            ("application_name", info.application_name.as_str()),
            ("client_encoding", info.client_encoding.as_str()),
        ];
        if let Some(options) = &info.options {
            params.push(("options", options.as_str()));
        }
        frontend::startup_message(params.iter().copied(), &mut out)?;
        Ok((Login { info, scram: None }, out))
    }

    /// The password: given, or from the password file.
    fn password(&self) -> Result<String, ClientError> {
        let info = self.info;
        if let Some(password) = &info.password {
            return Ok(password.clone());
        }
        let lookup = info.passfile.as_deref().map_or(Lookup::NotFound, |path| {
            passfile::lookup(path, &info.host, info.port, &info.dbname, &info.user)
        });
        match lookup {
            Lookup::Found(password) => Ok(password),
            Lookup::NotFound => Err(ClientError::Auth(
                "the server asks for a password: give password=, set PGPASSWORD, \
                 or add it to the password file (~/.pgpass)"
                    .into(),
            )),
            Lookup::Ignored(why) => Err(ClientError::Auth(format!(
                "the server asks for a password: give password= or set PGPASSWORD \
                 (the password file was not used: {why})"
            ))),
        }
    }

    /// One backend message of the start-up.
    pub(crate) fn step(&mut self, message: Message) -> Result<Step, ClientError> {
        let mut out = BytesMut::new();
        match message {
            Message::AuthenticationOk => {}
            Message::AuthenticationCleartextPassword => {
                frontend::password_message(self.password()?.as_bytes(), &mut out)?;
            }
            Message::AuthenticationMd5Password(body) => {
                let hash = md5_hash(
                    self.info.user.as_bytes(),
                    self.password()?.as_bytes(),
                    body.salt(),
                );
                frontend::password_message(hash.as_bytes(), &mut out)?;
            }
            Message::AuthenticationSasl(body) => {
                let mut mechanisms = body.mechanisms();
                let mut offered = false;
                while let Some(mechanism) = mechanisms.next()? {
                    offered |= mechanism == SCRAM_SHA_256;
                }
                if !offered {
                    return Err(ClientError::Auth(
                        "the server offers no SASL mechanism this client supports (SCRAM-SHA-256)"
                            .into(),
                    ));
                }
                let client =
                    ScramSha256::new(self.password()?.as_bytes(), ChannelBinding::unsupported());
                frontend::sasl_initial_response(SCRAM_SHA_256, client.message(), &mut out)?;
                self.scram = Some(client);
            }
            Message::AuthenticationSaslContinue(body) => {
                let client = self
                    .scram
                    .as_mut()
                    .ok_or_else(|| protocol("SASL continue without SASL"))?;
                client
                    .update(body.data())
                    .map_err(|e| ClientError::Auth(format!("SCRAM: {e}")))?;
                frontend::sasl_response(client.message(), &mut out)?;
            }
            Message::AuthenticationSaslFinal(body) => {
                let client = self
                    .scram
                    .as_mut()
                    .ok_or_else(|| protocol("SASL final without SASL"))?;
                client.finish(body.data()).map_err(|e| {
                    ClientError::Auth(format!("SCRAM: the server's proof is wrong: {e}"))
                })?;
            }
            Message::ReadyForQuery(_) => return Ok(Step::Done),
            Message::ErrorResponse(body) => return Err(server_error(&body)),
            Message::ParameterStatus(_)
            | Message::BackendKeyData(_)
            | Message::NoticeResponse(_) => {}
            _ => return Err(protocol("unexpected message during start-up")),
        }
        Ok(if out.is_empty() {
            Step::Wait
        } else {
            Step::Send(out)
        })
    }
}
