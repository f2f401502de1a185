//! libpq connection-string features against the live server, through `pgoutput tail`: the
//! password file (and a group-readable one ignored, as libpq does), `client_encoding` for a
//! SQL_ASCII database whose text is not UTF-8, and a plugin option passed with `-o`.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use pgoutput_tests::pg::Server;

use crate::scenario::TAIL_USER;
use crate::tail::{current_lsn, run_tail};

pub fn check_password_file(server: &Server) -> Result<String, String> {
    let (user, password) = TAIL_USER;
    let passfile = server.socket_dir().join("pgpass");
    // A Unix socket directory matches `localhost`, as in libpq.
    fs::write(
        &passfile,
        format!(
            "otherhost:*:*:*:nope\nlocalhost:{}:*:{user}:{password}\n",
            server.port()
        ),
    )
    .map_err(|e| e.to_string())?;
    let conninfo = format!(
        "{} passfile={}",
        server.conninfo(user, None),
        passfile.display()
    );
    let end = current_lsn(server)?;
    let args = [
        "--slot",
        "tail_passfile",
        "--create-slot",
        "--publication",
        "pub",
        "--end-lsn",
        &end,
    ];
    fs::set_permissions(&passfile, fs::Permissions::from_mode(0o644)).map_err(|e| e.to_string())?;
    let ignored = run_tail(&conninfo, &args)?;
    let stderr = String::from_utf8_lossy(&ignored.stderr);
    if ignored.status.success() || !stderr.contains("group or world access") {
        return Err(format!(
            "a group-readable password file: {}: {stderr}",
            ignored.status
        ));
    }
    fs::set_permissions(&passfile, fs::Permissions::from_mode(0o600)).map_err(|e| e.to_string())?;
    let used = run_tail(&conninfo, &args)?;
    let stderr = String::from_utf8_lossy(&used.stderr);
    if !used.status.success() || !stderr.contains("created slot tail_passfile") {
        return Err(format!("with the password file: {}: {stderr}", used.status));
    }
    Ok("SCRAM login with the password from passfile=; a group-readable file ignored".into())
}

pub fn check_client_encoding(server: &Server) -> Result<String, String> {
    server
        .psql(
            "CREATE DATABASE ascii_db ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' \
             TEMPLATE template0;",
        )
        .map_err(|e| e.to_string())?;
    let (user, password) = TAIL_USER;
    let psql_ascii = |sql: &str| {
        server
            .psql(&format!("\\connect ascii_db\n{sql}"))
            .map_err(|e| e.to_string())
    };
    psql_ascii(
        "CREATE TABLE latin (id int PRIMARY KEY, v text);\n\
         CREATE PUBLICATION latin_pub FOR TABLE latin;",
    )?;
    let conninfo = |extra: &str| {
        format!(
            "host={} port={} user={user} password={password} dbname=ascii_db {extra}",
            server.socket_dir().display(),
            server.port()
        )
    };
    let created = run_tail(
        &conninfo(""),
        &[
            "--slot",
            "latin_slot",
            "--create-slot",
            "--publication",
            "latin_pub",
            "--end-lsn",
            "0/1",
        ],
    )?;
    if !created.status.success() {
        return Err(String::from_utf8_lossy(&created.stderr).into_owned());
    }
    // 'café' in Latin-1: the é is the single byte 0xE9, not UTF-8.
    psql_ascii("INSERT INTO latin VALUES (1, convert_from('\\x636166e9', 'SQL_ASCII'));")?;
    let end = current_lsn(server)?;
    let args = [
        "--slot",
        "latin_slot",
        "--publication",
        "latin_pub",
        "--end-lsn",
        &end,
    ];
    let refused = run_tail(&conninfo(""), &args)?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    if refused.status.success() || !stderr.contains("invalid byte sequence for encoding \"UTF8\"") {
        return Err(format!(
            "client_encoding UTF8: {}: {stderr}",
            refused.status
        ));
    }
    let raw = run_tail(&conninfo("client_encoding=SQL_ASCII"), &args)?;
    let stdout = String::from_utf8_lossy(&raw.stdout);
    if !raw.status.success() || !stdout.contains("636166e9") {
        return Err(format!(
            "client_encoding SQL_ASCII: {}: {stdout}{}",
            raw.status,
            String::from_utf8_lossy(&raw.stderr)
        ));
    }
    Ok("UTF8 refused by the server for Latin-1 bytes; SQL_ASCII streams them (as hex)".into())
}

/// `-o origin=none` reaches pgoutput: PostgreSQL 16+ takes it, 15's pgoutput refuses it by
/// name (so the option really went to the server).
pub fn check_plugin_option(server: &Server) -> Result<String, String> {
    let (user, password) = TAIL_USER;
    let conninfo = server.conninfo(user, Some(password));
    let end = current_lsn(server)?;
    let args = [
        "--slot",
        "tail_origin",
        "--create-slot",
        "--publication",
        "pub",
        "-o",
        "origin=none",
        "--end-lsn",
        &end,
    ];
    let output = run_tail(&conninfo, &args)?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if server.major() >= 16 {
        if !output.status.success() {
            return Err(format!("-o origin=none: {}: {stderr}", output.status));
        }
        Ok("-o origin=none accepted".into())
    } else {
        if output.status.success() || !stderr.contains("unrecognized pgoutput option: origin") {
            return Err(format!(
                "-o origin=none on {}: {}: {stderr}",
                server.major(),
                output.status
            ));
        }
        Ok("-o origin=none reached pgoutput, which refuses it by name before 16".into())
    }
}
