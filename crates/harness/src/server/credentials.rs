//! Who may log in, and how: trust, a cleartext password, or SCRAM-SHA-256 with a
//! verifier (the exchange itself is `connection/auth.rs`).

use std::fmt;

use pgoutput_wire::scram::Verifier;

/// How clients log in.
#[derive(Clone, PartialEq, Eq)]
pub struct Auth(pub(super) AuthKind);

#[derive(Clone, PartialEq, Eq)]
pub(super) enum AuthKind {
    Trust,
    Cleartext { user: String, password: String },
    Scram { user: String, verifier: Verifier },
}

impl Auth {
    /// Whether the password is empty (a verifier is checked when it costs little).
    pub(super) fn has_empty_password(&self) -> bool {
        match &self.0 {
            AuthKind::Trust => false,
            AuthKind::Cleartext { password, .. } => password.is_empty(),
            AuthKind::Scram { verifier, .. } => {
                verifier.iterations() <= 100_000 && verifier.is_for("")
            }
        }
    }

    /// Whether anyone may log in (trust).
    #[must_use]
    pub fn is_trust(&self) -> bool {
        matches!(self.0, AuthKind::Trust)
    }

    /// Any user, no password (`trust` in `pg_hba.conf`).
    #[must_use]
    pub fn trust() -> Auth {
        Auth(AuthKind::Trust)
    }

    /// `user` with a cleartext `password` (`password` in `pg_hba.conf`).
    #[must_use]
    pub fn password(user: &str, password: &str) -> Auth {
        Auth(AuthKind::Cleartext {
            user: user.to_owned(),
            password: password.to_owned(),
        })
    }

    /// `user` with SCRAM-SHA-256; the server keeps only a verifier made from `password`.
    #[must_use]
    pub fn scram(user: &str, password: &str) -> Auth {
        Auth(AuthKind::Scram {
            user: user.to_owned(),
            verifier: Verifier::from_password(password),
        })
    }

    /// `user` with SCRAM-SHA-256 and a stored verifier as `pg_authid.rolpassword` holds it
    /// (`SCRAM-SHA-256$4096:salt$StoredKey:ServerKey`); `None` if it is not one.
    #[must_use]
    pub fn scram_verifier(user: &str, verifier: &str) -> Option<Auth> {
        Some(Auth(AuthKind::Scram {
            user: user.to_owned(),
            verifier: Verifier::parse(verifier)?,
        }))
    }

    pub(super) fn user(&self) -> Option<&str> {
        match &self.0 {
            AuthKind::Trust => None,
            AuthKind::Cleartext { user, .. } | AuthKind::Scram { user, .. } => Some(user),
        }
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            AuthKind::Trust => f.write_str("Auth::trust"),
            AuthKind::Cleartext { user, .. } => write!(f, "Auth::password({user:?}, ..)"),
            AuthKind::Scram { user, .. } => write!(f, "Auth::scram({user:?}, ..)"),
        }
    }
}
