//! The start-up state: SSL and GSS requests (refused), the start-up packet, and the
//! checks PostgreSQL makes before authentication; then, once authenticated, the welcome
//! (parameters, key data, ReadyForQuery).

use std::io::Write;
use std::net::SocketAddr;
use std::time::Instant;

use super::{Closed, Connection};
use crate::server::state::pid;
use pgoutput_wire::backend;
use pgoutput_wire::error::{setting_name, sqlstate};
use pgoutput_wire::frontend::Startup;

/// Who the start-up packet says the client is.
pub(super) struct Login {
    pub user: String,
    pub application_name: String,
    pub database: String,
}

impl<W: Write> Connection<'_, W> {
    /// The start-up packet, within `authentication_timeout` (PostgreSQL times it on its
    /// own, then authentication afresh). `None`: the client went away, or cancelled.
    pub(super) fn startup(&mut self, peer: SocketAddr) -> Result<Option<Login>, Closed> {
        self.deadline = Some(Instant::now() + self.shared.config.authentication_timeout);
        let params = loop {
            match self.next_startup() {
                // PostgreSQL closes without a word when the packet does not come in time.
                Err(Closed::Silently(_)) => {
                    return Err(Closed::Silently("no start-up packet in time".into()))
                }
                Err(closed) => return Err(closed),
                Ok(None) | Ok(Some(Startup::CancelRequest)) => return Ok(None),
                Ok(Some(Startup::SslRequest | Startup::GssEncRequest)) => {
                    self.out.push(b'N');
                    self.flush()?;
                }
                Ok(Some(Startup::Params { params, .. })) => break params,
            }
        };
        let param = |name: &str| {
            params
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let user = param("user").unwrap_or_default();
        let application_name = param("application_name").unwrap_or_default();
        self.shared
            .lock()
            .records_mut()
            .add_client(self.id, &user, &application_name);
        self.shared.log(format!(
            "client {}: connected from {peer} as {user:?}, application_name {application_name:?}",
            self.id
        ));
        if user.is_empty() {
            return Err(self.fatal(
                sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                "no PostgreSQL user name specified in startup packet",
            ));
        }
        if param("replication").as_deref() != Some("database") {
            return Err(self.fatal(
                sqlstate::FEATURE_NOT_SUPPORTED,
                "this test server serves logical replication connections only: connect with replication=database",
            ));
        }
        // A walsender takes one of max_wal_senders' places before it authenticates
        // (InitProcess), for as long as it is connected.
        let max = self.shared.config.max_wal_senders;
        if !self.shared.lock().add_walsender(max) {
            return Err(self.fatal(
                sqlstate::TOO_MANY_CONNECTIONS,
                &format!(
                    "number of requested standby connections exceeds {} (currently {max})",
                    setting_name("max_wal_senders", self.shared.config.major)
                ),
            ));
        }
        self.walsender = true;
        let database = param("database").unwrap_or_else(|| user.clone());
        Ok(Some(Login {
            user,
            application_name,
            database,
        }))
    }

    /// After authentication: AuthenticationOk, then the database must exist, then the
    /// welcome. PostgreSQL says so in this order (`ClientAuthentication` ends with
    /// AuthenticationOk; `InitPostgres` looks the database up afterwards), so a stranger
    /// learns nothing about database names before the password.
    pub(super) fn welcome(&mut self, login: &Login) -> Result<(), Closed> {
        self.deadline = None;
        backend::authentication(&mut self.out, backend::AUTH_OK, &[]);
        let config = &self.shared.config;
        if login.database != config.database {
            return Err(self.fatal(
                sqlstate::INVALID_CATALOG_NAME,
                &format!("database \"{}\" does not exist", login.database),
            ));
        }
        let mut status = vec![
            ("in_hot_standby", "off"),
            ("integer_datetimes", "on"),
            ("TimeZone", "Etc/UTC"),
            ("IntervalStyle", "postgres"),
            ("is_superuser", "on"),
            ("application_name", login.application_name.as_str()),
            ("default_transaction_read_only", "off"),
            ("DateStyle", "ISO, MDY"),
            ("standard_conforming_strings", "on"),
            ("session_authorization", login.user.as_str()),
            ("client_encoding", "UTF8"),
            ("server_version", config.server_version.as_str()),
            ("server_encoding", "UTF8"),
        ];
        if config.major >= 18 {
            status.push(("search_path", "\"$user\", public"));
            status.push(("scram_iterations", "4096"));
        }
        for (name, value) in status {
            backend::parameter_status(&mut self.out, name, value);
        }
        backend::backend_key_data(
            &mut self.out,
            pid(self.id) as u32,
            0x5eed_0000 ^ self.id as u32,
        );
        self.ready()
    }
}
