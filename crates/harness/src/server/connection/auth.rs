//! The authentication state: trust, a cleartext password, or SCRAM-SHA-256 against a stored
//! verifier, as the start-up packet's user asks.

use std::io::Write;
use std::time::Instant;

use subtle::ConstantTimeEq;

use super::startup::Login;
use super::{Closed, Connection};
use crate::server::credentials::AuthKind;
use pgoutput_wire::backend;
use pgoutput_wire::error::sqlstate;
use pgoutput_wire::frontend::{sasl_initial_response, Frontend};
use pgoutput_wire::scram;

impl<W: Write> Connection<'_, W> {
    /// The authentication state, within a fresh `authentication_timeout` (PostgreSQL
    /// closes without a word when it passes), then the welcome.
    pub(super) fn authenticate(&mut self, login: &Login) -> Result<(), Closed> {
        self.deadline = Some(Instant::now() + self.shared.config.authentication_timeout);
        self.exchange(&login.user)?;
        self.welcome(login)
    }

    fn exchange(&mut self, user: &str) -> Result<(), Closed> {
        let auth = self.shared.config.auth.clone();
        let failed = |session: &mut Self| {
            session.fatal(
                sqlstate::INVALID_PASSWORD,
                &format!("password authentication failed for user \"{user}\""),
            )
        };
        match &auth.0 {
            AuthKind::Trust => Ok(()),
            AuthKind::Cleartext {
                user: expected,
                password,
            } => {
                backend::authentication(&mut self.out, backend::AUTH_CLEARTEXT, &[]);
                self.flush()?;
                let Frontend::Password(body) = self.next()? else {
                    return Err(
                        self.fatal(sqlstate::PROTOCOL_VIOLATION, "expected password response")
                    );
                };
                let given = body.strip_suffix(&[0]).unwrap_or(&body);
                // In constant time: how much of a guess matched must not show in timing.
                let matches: bool = given.ct_eq(password.as_bytes()).into();
                if expected == user && matches {
                    Ok(())
                } else {
                    Err(failed(self))
                }
            }
            AuthKind::Scram {
                user: expected,
                verifier,
            } => {
                backend::authentication_sasl(&mut self.out, &["SCRAM-SHA-256"]);
                self.flush()?;
                let Frontend::Password(body) = self.next()? else {
                    return Err(self.fatal(sqlstate::PROTOCOL_VIOLATION, "expected SASL response"));
                };
                let initial = match sasl_initial_response(&body) {
                    Ok(initial) => initial,
                    Err(why) => return Err(self.fatal(sqlstate::PROTOCOL_VIOLATION, why)),
                };
                if initial.mechanism != b"SCRAM-SHA-256" {
                    return Err(self.fatal(
                        sqlstate::PROTOCOL_VIOLATION,
                        "client selected an invalid SASL authentication mechanism",
                    ));
                }
                let data = initial.data.unwrap_or_default();
                let (exchange, server_first) = match scram::start(verifier, data) {
                    Ok(started) => started,
                    Err(why) => return Err(self.fatal(sqlstate::PROTOCOL_VIOLATION, why)),
                };
                backend::authentication(
                    &mut self.out,
                    backend::AUTH_SASL_CONTINUE,
                    server_first.as_bytes(),
                );
                self.flush()?;
                let Frontend::Password(client_final) = self.next()? else {
                    return Err(self.fatal(sqlstate::PROTOCOL_VIOLATION, "expected SASL response"));
                };
                match exchange.finish(&client_final) {
                    Ok(server_final) if expected == user => {
                        backend::authentication(
                            &mut self.out,
                            backend::AUTH_SASL_FINAL,
                            server_final.as_bytes(),
                        );
                        Ok(())
                    }
                    _ => Err(failed(self)),
                }
            }
        }
    }
}
