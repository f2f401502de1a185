//! TLS against a real server with `ssl = on` and a `hostssl`-only `pg_hba.conf`, the
//! certificates made by the test setup: every `sslmode`, a root certificate that did not
//! sign the server's, a `verify-full` name mismatch, a client certificate, and
//! `pgoutput tail` streaming over `verify-full`.

use pgoutput_client::{ClientError, ConnInfo, Connection};
use pgoutput_tests::pg::{Server, CERT_USER};

use crate::tail::{current_lsn, run_tail};

const USER: &str = "tls_tailer";
const PASSWORD: &str = "tls-secret";

fn conninfo(server: &Server, host: &str, user: &str, extra: &str) -> String {
    format!(
        "host={host} port={} user={user} password={PASSWORD} dbname=postgres {extra}",
        server.port()
    )
}

/// Connects with `conninfo`; on success, says whether TLS is in use and runs
/// IDENTIFY_SYSTEM to show the session works.
fn connect(conninfo: &str) -> Result<bool, ClientError> {
    let info = ConnInfo::parse(Some(conninfo), |_| None)?;
    let mut conn = Connection::connect(&info)?;
    let rows = conn.simple_query("IDENTIFY_SYSTEM")?;
    if rows.len() != 1 {
        return Err(ClientError::Protocol(format!(
            "IDENTIFY_SYSTEM gave {rows:?}"
        )));
    }
    let tls = conn.is_tls();
    conn.close()?;
    Ok(tls)
}

fn expect_tls(what: &str, conninfo: &str) -> Result<(), String> {
    match connect(conninfo) {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!("{what}: connected without TLS")),
        Err(err) => Err(format!("{what}: {err}")),
    }
}

fn expect_refused(
    what: &str,
    conninfo: &str,
    check: impl Fn(&ClientError) -> bool,
) -> Result<(), String> {
    match connect(conninfo) {
        Ok(tls) => Err(format!(
            "{what}: connected (TLS: {tls}) but must be refused"
        )),
        Err(err) if check(&err) => Ok(()),
        Err(err) => Err(format!("{what}: refused for the wrong reason: {err}")),
    }
}

pub fn check(server: &Server) -> Result<String, String> {
    let files = server.tls_files().ok_or("the server has no TLS")?;
    server
        .psql(&format!(
            "CREATE ROLE {USER} LOGIN REPLICATION PASSWORD '{PASSWORD}';\n\
             CREATE ROLE {CERT_USER} LOGIN REPLICATION;\n\
             CREATE TABLE tls_t (id int PRIMARY KEY, v text);\n\
             CREATE PUBLICATION tls_pub FOR TABLE tls_t;"
        ))
        .map_err(|e| e.to_string())?;
    let ca = format!("sslrootcert={}", files.ca.display());
    let other_ca = format!("sslrootcert={}", files.other_ca.display());
    let refused_by_hba = |err: &ClientError| {
        err.server_error()
            .is_some_and(|e| e.code == "28000" && e.message.contains("no encryption"))
    };
    let tls_error = |needle: &'static str| move |err: &ClientError| matches!(err, ClientError::Tls(text) if text.contains(needle));

    expect_refused(
        "sslmode=disable against hostssl only",
        &conninfo(server, "127.0.0.1", USER, "sslmode=disable"),
        refused_by_hba,
    )?;
    expect_tls(
        "sslmode=prefer",
        &conninfo(server, "127.0.0.1", USER, "sslmode=prefer"),
    )?;
    expect_tls(
        "sslmode=allow (refused without TLS, then with it)",
        &conninfo(server, "127.0.0.1", USER, "sslmode=allow"),
    )?;
    expect_tls(
        "sslmode=require without a root certificate",
        &conninfo(server, "127.0.0.1", USER, "sslmode=require"),
    )?;
    expect_refused(
        "sslmode=require with a root certificate that did not sign the server's",
        &conninfo(
            server,
            "127.0.0.1",
            USER,
            &format!("sslmode=require {other_ca}"),
        ),
        tls_error("UnknownIssuer"),
    )?;
    expect_tls(
        "sslmode=verify-ca to 127.0.0.1 (the name is not checked)",
        &conninfo(
            server,
            "127.0.0.1",
            USER,
            &format!("sslmode=verify-ca {ca}"),
        ),
    )?;
    expect_refused(
        "sslmode=verify-ca with the wrong root",
        &conninfo(
            server,
            "127.0.0.1",
            USER,
            &format!("sslmode=verify-ca {other_ca}"),
        ),
        tls_error("UnknownIssuer"),
    )?;
    expect_refused(
        "sslmode=verify-ca without a root certificate",
        &conninfo(server, "127.0.0.1", USER, "sslmode=verify-ca"),
        tls_error("root certificate"),
    )?;
    expect_tls(
        "sslmode=verify-full to localhost",
        &conninfo(
            server,
            "localhost",
            USER,
            &format!("sslmode=verify-full {ca}"),
        ),
    )?;
    expect_refused(
        "sslmode=verify-full to 127.0.0.1 (the certificate is for localhost)",
        &conninfo(
            server,
            "127.0.0.1",
            USER,
            &format!("sslmode=verify-full {ca}"),
        ),
        tls_error("not valid for name"),
    )?;
    let cert = format!(
        "sslcert={} sslkey={}",
        files.client_cert.display(),
        files.client_key.display()
    );
    expect_tls(
        "a client certificate for the cert-authenticated role",
        &conninfo(
            server,
            "localhost",
            CERT_USER,
            &format!("sslmode=verify-full {ca} {cert}"),
        ),
    )?;
    expect_refused(
        "the cert-authenticated role without a client certificate",
        &conninfo(
            server,
            "localhost",
            CERT_USER,
            &format!("sslmode=verify-full {ca}"),
        ),
        |err| err.server_error().is_some_and(|e| e.code == "28000"),
    )?;
    let tailed = tail_over_tls(server, &format!("sslmode=verify-full {ca}"))?;
    async_over_tls(server, &ca)?;
    let proxied = proxy_over_tls(server, files)?;
    Ok(format!(
        "disable refused, prefer/allow/require/verify-ca/verify-full connect, wrong root and \
         name mismatch refused, client certificate accepted; tail printed {tailed} lines; the \
         async consumer streamed over verify-full and refused the name mismatch; {proxied}"
    ))
}

/// The proxy with the server's certificate, in front of it over TLS: a client with
/// `verify-full` speaks TLS with the proxy (which speaks TLS with the server); without a
/// certificate the proxy answers `N`, and `sslmode=require` is refused as PostgreSQL
/// without TLS refuses it.
fn proxy_over_tls(server: &Server, files: &pgoutput_tests::pg::TlsFiles) -> Result<String, String> {
    use pgoutput_harness::proxy::Proxy;
    let upstream = format!(
        "host=localhost port={} sslmode=verify-full sslrootcert={}",
        server.port(),
        files.ca.display()
    );
    let proxy = Proxy::builder(&upstream)
        .map_err(|e| e.to_string())?
        .tls(&files.server_cert, &files.server_key)
        .start()
        .map_err(|e| e.to_string())?;
    let through = |proxy: &Proxy, extra: &str| {
        format!(
            "host=localhost port={} user={USER} password={PASSWORD} dbname=postgres {extra}",
            proxy.addr().port()
        )
    };
    let ca = format!("sslrootcert={}", files.ca.display());
    expect_tls(
        "sslmode=verify-full through the proxy",
        &through(&proxy, &format!("sslmode=verify-full {ca}")),
    )?;
    // The upstream's pg_hba.conf takes TLS connections only: the proxy's own leg is TLS,
    // so a client without TLS gets in too (the proxy decides nothing of the login).
    match connect(&through(&proxy, "sslmode=disable")) {
        Ok(false) => {}
        other => return Err(format!("sslmode=disable through the proxy: {other:?}")),
    }
    let plain = Proxy::builder(&upstream)
        .map_err(|e| e.to_string())?
        .start()
        .map_err(|e| e.to_string())?;
    expect_refused(
        "sslmode=require through a proxy without a certificate",
        &through(&plain, "sslmode=require"),
        |err| matches!(err, ClientError::Tls(text) if text.contains("does not support TLS")),
    )?;
    Ok("the proxy with a certificate spoke TLS with a verify-full client (and TLS upstream), without one it answered N".into())
}

/// The async consumer (tokio-rustls) over `verify-full`: a name mismatch is refused as
/// the blocking client refuses it, and with the right name an insert streams through.
fn async_over_tls(server: &Server, ca: &str) -> Result<(), String> {
    use pgoutput_client::tokio::Consumer;
    use pgoutput_client::{ConsumerConfig, StreamOptions};
    use pgoutput_codec::ProtocolVersion;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let config = || {
            ConsumerConfig::new(
                "tls_async",
                StreamOptions::new(ProtocolVersion::V1, &["tls_pub"]),
            )
            .create_slot(true)
        };
        let wrong = ConnInfo::parse(
            Some(&conninfo(
                server,
                "127.0.0.1",
                USER,
                &format!("sslmode=verify-full {ca}"),
            )),
            |_| None,
        )
        .map_err(|e| e.to_string())?;
        match Consumer::connect(&wrong, config()).await {
            Err(ClientError::Tls(text)) if text.contains("not valid for name") => {}
            Err(err) => return Err(format!("async, name mismatch: the wrong error: {err}")),
            Ok(_) => return Err("async, name mismatch: connected".into()),
        }
        let right = ConnInfo::parse(
            Some(&conninfo(
                server,
                "localhost",
                USER,
                &format!("sslmode=verify-full {ca}"),
            )),
            |_| None,
        )
        .map_err(|e| e.to_string())?;
        let mut consumer = Consumer::connect(&right, config())
            .await
            .map_err(|e| format!("async over verify-full: {e}"))?;
        server
            .psql("INSERT INTO tls_t VALUES (2, 'over async TLS');")
            .map_err(|e| e.to_string())?;
        loop {
            let event = tokio::time::timeout(std::time::Duration::from_secs(30), consumer.next())
                .await
                .map_err(|_| "async over TLS: no insert within 30 s".to_owned())?
                .map_err(|e| e.to_string())?
                .ok_or("async over TLS: the stream ended")?;
            if let Some(row) = event.new_row() {
                let value: Option<String> = row.get(1).and_then(|c| c.value().ok()).flatten();
                if value.as_deref() == Some("over async TLS") {
                    break;
                }
            }
        }
        consumer.close().await;
        Ok(())
    })
}

/// `pgoutput tail` with `conninfo`'s TLS settings streams an insert.
fn tail_over_tls(server: &Server, tls: &str) -> Result<usize, String> {
    let conninfo = conninfo(server, "localhost", USER, tls);
    let tail = |args: &[&str]| {
        run_tail(
            &conninfo,
            &[&["--slot", "tls_slot", "--publication", "tls_pub"], args].concat(),
        )
    };
    let create = tail(&["--create-slot", "--end-lsn", &current_lsn(server)?])?;
    if !create.status.success() {
        return Err(String::from_utf8_lossy(&create.stderr).into_owned());
    }
    server
        .psql("INSERT INTO tls_t VALUES (1, 'over TLS');")
        .map_err(|e| e.to_string())?;
    let output = tail(&["--end-lsn", &current_lsn(server)?])?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || !stdout.contains("over TLS") {
        return Err(format!(
            "tail over TLS: {}\n{stdout}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(stdout.lines().count())
}
