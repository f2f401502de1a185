//! The server side of SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL does it: the user
//! name in the client-first message is ignored (the start-up packet names the user), and no
//! channel binding is offered. Verifiers have PostgreSQL's stored form,
//! `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use rand::RngExt;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A stored SCRAM-SHA-256 verifier: what the server keeps instead of the password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier {
    iterations: u32,
    salt: Vec<u8>,
    stored_key: Vec<u8>,
    server_key: Vec<u8>,
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

impl Verifier {
    /// Parses PostgreSQL's stored form; `None` if it is not one.
    pub fn parse(text: &str) -> Option<Verifier> {
        let rest = text.strip_prefix("SCRAM-SHA-256$")?;
        let (params, keys) = rest.split_once('$')?;
        let (iterations, salt) = params.split_once(':')?;
        let (stored_key, server_key) = keys.split_once(':')?;
        let verifier = Verifier {
            iterations: iterations.parse().ok().filter(|&i| i > 0)?,
            salt: STANDARD.decode(salt).ok()?,
            stored_key: STANDARD.decode(stored_key).ok()?,
            server_key: STANDARD.decode(server_key).ok()?,
        };
        (verifier.stored_key.len() == 32 && verifier.server_key.len() == 32).then_some(verifier)
    }

    /// Whether the verifier was made from `password` (RFC 5802's `Hi`, then the stored
    /// key), compared in constant time.
    pub fn is_for(&self, password: &str) -> bool {
        let mut block = self.salt.clone();
        block.extend_from_slice(&1u32.to_be_bytes());
        let mut u = hmac(password.as_bytes(), &block);
        let mut salted = u.clone();
        for _ in 1..self.iterations {
            u = hmac(password.as_bytes(), &u);
            for (s, b) in salted.iter_mut().zip(&u) {
                *s ^= b;
            }
        }
        let client_key = hmac(&salted, b"Client Key");
        Sha256::digest(&client_key)
            .as_slice()
            .ct_eq(&self.stored_key)
            .into()
    }

    /// The iteration count (what checking a password against the verifier costs).
    pub fn iterations(&self) -> u32 {
        self.iterations
    }

    /// A verifier for `password` with a random salt and 4096 iterations, as
    /// `CREATE ROLE … PASSWORD` makes it.
    pub fn from_password(password: &str) -> Verifier {
        let text = postgres_protocol::password::scram_sha_256(password.as_bytes());
        Verifier::parse(&text).expect("postgres-protocol writes PostgreSQL's verifier form")
    }
}

/// An exchange after the client-first message: what the server sent, waiting for the
/// client's proof.
#[derive(Debug)]
pub struct Exchange {
    verifier: Verifier,
    gs2_header: String,
    nonce: String,
    client_first_bare: String,
    server_first: String,
}

/// Why authentication failed (the client is told only that it failed, as PostgreSQL does).
pub type Failure = &'static str;

/// Reads the client-first message and returns the exchange and the server-first message.
pub fn start(verifier: &Verifier, client_first: &[u8]) -> Result<(Exchange, String), Failure> {
    let text =
        std::str::from_utf8(client_first).map_err(|_| "client-first message is not UTF-8")?;
    // gs2-header: a channel-binding flag ("n" or "y"; "p=…" asks for binding we do not
    // offer), an optional authzid, then the bare message.
    let (flag, rest) = text.split_once(',').ok_or("malformed SCRAM message")?;
    if flag.starts_with('p') {
        return Err("channel binding is not supported by this server");
    }
    if flag != "n" && flag != "y" {
        return Err("malformed SCRAM message: invalid channel-binding flag");
    }
    let (authzid, bare) = rest.split_once(',').ok_or("malformed SCRAM message")?;
    if !authzid.is_empty() {
        return Err("client uses authorization identity, but it is not supported");
    }
    let client_nonce = bare
        .split(',')
        .find_map(|attr| attr.strip_prefix("r="))
        .filter(|n| !n.is_empty())
        .ok_or("malformed SCRAM message: no client nonce")?;
    let mut rng = rand::rng();
    let server_nonce: String = (0..18)
        .map(|_| {
            let c = rng.random_range(0x21u8..0x7e);
            char::from(if c == b',' { b'~' } else { c })
        })
        .collect();
    let nonce = format!("{client_nonce}{server_nonce}");
    let server_first = format!(
        "r={nonce},s={},i={}",
        STANDARD.encode(&verifier.salt),
        verifier.iterations
    );
    let exchange = Exchange {
        verifier: verifier.clone(),
        gs2_header: format!("{flag},{authzid},"),
        nonce,
        client_first_bare: bare.to_owned(),
        server_first: server_first.clone(),
    };
    Ok((exchange, server_first))
}

impl Exchange {
    /// Checks the client-final message's proof; returns the server-final message.
    pub fn finish(self, client_final: &[u8]) -> Result<String, Failure> {
        let text =
            std::str::from_utf8(client_final).map_err(|_| "client-final message is not UTF-8")?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or("malformed SCRAM message: no proof")?;
        let mut binding = None;
        let mut nonce = None;
        for attr in without_proof.split(',') {
            if let Some(value) = attr.strip_prefix("c=") {
                binding = Some(value);
            } else if let Some(value) = attr.strip_prefix("r=") {
                nonce = Some(value);
            }
        }
        if binding.and_then(|b| STANDARD.decode(b).ok()).as_deref()
            != Some(self.gs2_header.as_bytes())
        {
            return Err("unexpected SCRAM channel-binding attribute in client-final-message");
        }
        if nonce != Some(self.nonce.as_str()) {
            return Err("SCRAM nonce mismatch");
        }
        let proof = STANDARD
            .decode(proof)
            .map_err(|_| "malformed SCRAM proof")?;
        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.server_first
        );
        let signature = hmac(&self.verifier.stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return Err("malformed SCRAM proof");
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        // In constant time, as PostgreSQL's `verify_client_proof` does.
        let matches: bool = Sha256::digest(&client_key)
            .as_slice()
            .ct_eq(self.verifier.stored_key.as_slice())
            .into();
        if !matches {
            return Err("password does not match");
        }
        let server_signature = hmac(&self.verifier.server_key, auth_message.as_bytes());
        Ok(format!("v={}", STANDARD.encode(server_signature)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};

    #[test]
    fn a_verifier_knows_its_password() {
        let verifier = Verifier::from_password("pw");
        assert!(verifier.is_for("pw"));
        assert!(!verifier.is_for("pW"));
        assert!(Verifier::from_password("").is_for(""));
    }

    fn exchange(server_password: &str, client_password: &str) -> Result<(), Failure> {
        let verifier = Verifier::from_password(server_password);
        let mut client =
            ScramSha256::new(client_password.as_bytes(), ChannelBinding::unsupported());
        let (exchange, server_first) = start(&verifier, client.message())?;
        client.update(server_first.as_bytes()).unwrap();
        let server_final = exchange.finish(client.message())?;
        // The client checks the server's signature too: both sides know the password.
        client
            .finish(server_final.as_bytes())
            .map_err(|_| "client refused the server signature")
    }

    #[test]
    fn postgres_protocol_client_logs_in() {
        assert_eq!(exchange("s3cret", "s3cret"), Ok(()));
        assert_eq!(exchange("s3cret", "wrong"), Err("password does not match"));
    }

    #[test]
    fn verifier_form() {
        assert!(Verifier::parse("SCRAM-SHA-256$4096:c2FsdA==$AAAA:BBBB").is_none());
        assert!(Verifier::parse("md5abc").is_none());
        let text = postgres_protocol::password::scram_sha_256(b"x");
        assert!(Verifier::parse(&text).is_some());
    }
}
