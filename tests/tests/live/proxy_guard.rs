//! The proxy guards itself as PostgreSQL does, each check against the live server with the
//! same bytes sent to it directly: a length header of 2 GiB costs the proxy nothing it
//! did not need (the message goes on as it comes, and PostgreSQL refuses the length at
//! once); made-up slot names, and a START_REPLICATION before login, leave no state; a
//! client that sends nothing is closed after `authentication_timeout`; a client past
//! `max_connections` gets FATAL 53300; an SSLRequest asked twice gets PostgreSQL's FATAL;
//! a default proxy in front of a `peer`-only server lets no one in as its own OS user.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use pgoutput_harness::proxy::Proxy;
use pgoutput_tests::pg::{Server, ServerBinaries};

use crate::proxy::{create_slot, drop_slot, error_fields, read_until, startup_packet};
use crate::scenario::TAIL_USER;

/// How long a read waits for what the check expects before it fails (the event, not a
/// timing: a close or an answer that must come).
const READ_WAIT: Duration = Duration::from_secs(30);

/// What the length header claims: 2 GiB less 16 bytes.
const HUGE: u32 = 0x7FFF_FFF0;

/// What the client sends behind the header (or less, once the connection is closed).
const BEHIND: usize = 64 * 1024 * 1024;

/// Where a raw client connects: the proxy's TCP address, or the server's own socket.
#[derive(Debug, Clone)]
enum Target {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// A raw client's connection.
enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Conn {
    fn open(target: &Target) -> Result<Conn, String> {
        let conn = match target {
            Target::Tcp(addr) => TcpStream::connect(addr).map(Conn::Tcp),
            Target::Unix(path) => UnixStream::connect(path).map(Conn::Unix),
        }
        .map_err(|e| format!("{target:?}: {e}"))?;
        match &conn {
            Conn::Tcp(s) => s.set_read_timeout(Some(READ_WAIT)),
            Conn::Unix(s) => s.set_read_timeout(Some(READ_WAIT)),
        }
        .map_err(|e| e.to_string())?;
        Ok(conn)
    }

    fn try_clone(&self) -> Result<Conn, String> {
        match self {
            Conn::Tcp(s) => s.try_clone().map(Conn::Tcp),
            Conn::Unix(s) => s.try_clone().map(Conn::Unix),
        }
        .map_err(|e| e.to_string())
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.read(buf),
            Conn::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(buf),
            Conn::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The server's own socket.
fn direct(server: &Server) -> Target {
    Target::Unix(
        server
            .socket_dir()
            .join(format!(".s.PGSQL.{}", server.port())),
    )
}

pub fn check_guard(server: &Server, bin: &Path) -> Result<String, String> {
    let peer = peer_only_upstream(bin)?;
    let huge = huge_length(server, &crate::tail::binary()?)?;
    let proxy = Proxy::builder(&upstream(server))
        .map_err(|e| e.to_string())?
        .authentication_timeout(Duration::from_secs(1))
        .max_connections(4)
        .start()
        .map_err(|e| e.to_string())?;
    let direct = direct(server);
    let slots = made_up_slots(&proxy)?;
    let before_login = before_login(server, &proxy, &direct)?;
    let silent = silent_client(&proxy)?;
    let ssl = second_ssl_request(&proxy, &direct)?;
    let limit = connection_limit(&proxy)?;
    proxy.stop();
    Ok(format!(
        "{peer}; {huge}; {slots}; {before_login}; {silent}; {ssl}; {limit}"
    ))
}

/// A server whose `pg_hba.conf` is `local all all peer` only (the proxy's OS user mapped
/// to `postgres`, as a packaged cluster lets its administrator in), listening on
/// `127.0.0.1` and on sockets, `/var/run/postgresql` among them where it exists: a proxy
/// whose upstream names no host reaches it over TCP, so its client meets the FATAL 28000
/// a TCP login gets there, byte for byte, and is not let in as the proxy's user; one whose
/// upstream names the socket directory is (the user said so).
fn peer_only_upstream(bin: &Path) -> Result<String, String> {
    let os_user = Command::new("id")
        .arg("-un")
        .output()
        .map_err(|e| e.to_string())?;
    let os_user = String::from_utf8_lossy(&os_user.stdout).trim().to_owned();
    // One directory per installation: the installations' checks run at once.
    let name = bin.display().to_string().replace('/', "_");
    let dir = std::env::temp_dir().join(format!("pgoutput-peer-{}{name}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let files = [
        ("pg_hba.conf", "local all all peer map=admins\n".to_owned()),
        (
            "pg_ident.conf",
            format!("admins {os_user} postgres\nadmins postgres postgres\n"),
        ),
    ];
    for (name, text) in &files {
        std::fs::write(dir.join(name), text).map_err(|e| e.to_string())?;
    }
    // The server's own user reads the files and makes its socket in the directory.
    let _ = Command::new("chmod")
        .arg("-R")
        .arg("a+rwX")
        .arg(&dir)
        .status();
    let mut sockets = dir.display().to_string();
    if Path::new("/var/run/postgresql").is_dir() {
        sockets.push_str(", /var/run/postgresql");
    }
    let settings = [
        "listen_addresses = '127.0.0.1'".to_owned(),
        format!("unix_socket_directories = '{sockets}'"),
        format!("hba_file = '{}'", dir.join("pg_hba.conf").display()),
        format!("ident_file = '{}'", dir.join("pg_ident.conf").display()),
    ];
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let binaries = ServerBinaries {
        bin: bin.to_path_buf(),
        source: "the live installation",
    };
    let result = (|| {
        let server = Server::start_with_settings(&binaries, &settings)
            .map_err(|e| format!("the peer-only server: {e}"))?;
        let port = server.port();
        let login = |target: &Target| -> Result<Vec<(u8, Vec<u8>)>, String> {
            let mut client = Conn::open(target)?;
            client
                .write_all(&startup_packet("postgres", &[]))
                .map_err(|e| e.to_string())?;
            read_until(&mut client, b'Z')
        };
        let tcp = login(&Target::Tcp(SocketAddr::from(([127, 0, 0, 1], port))))?;
        let default = Proxy::builder(&format!("port={port}"))
            .map_err(|e| e.to_string())?
            .start()
            .map_err(|e| e.to_string())?;
        let through = login(&Target::Tcp(default.addr()))?;
        default.stop();
        if through != tcp {
            return Err(format!(
                "a default proxy in front of a peer-only server answered {through:?}; a TCP login there gets {tcp:?}"
            ));
        }
        let Some((b'E', body)) = through.last() else {
            return Err(format!(
                "a TCP login to a peer-only server answered {tcp:?}"
            ));
        };
        let (severity, code, message) = error_fields(body);
        if code != "28000" {
            return Err(format!("answered {severity} {code} {message}"));
        }
        let named = Proxy::builder(&format!("host={} port={port}", dir.display()))
            .map_err(|e| e.to_string())?
            .start()
            .map_err(|e| e.to_string())?;
        let by_socket = login(&Target::Tcp(named.addr()));
        named.stop();
        if !matches!(by_socket?.last(), Some((b'Z', _))) {
            return Err("a proxy whose upstream names the socket did not log in by peer".into());
        }
        Ok(format!(
            "in front of a peer-only server a default proxy went by TCP and relayed {severity} {code} \"{message}\" as PostgreSQL sends it (one naming the socket logged in by peer)"
        ))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The upstream as a user would give it: no user, no password (each client logs in as
/// itself); the live server listens on its socket only, which the string names.
fn upstream(server: &Server) -> String {
    format!(
        "host={} port={}",
        server.socket_dir().display(),
        server.port()
    )
}

/// A client logged in as `postgres` (trusted on loopback), `more` start-up parameters.
fn logged_in(target: &Target, more: &[(&str, &str)]) -> Result<Conn, String> {
    let mut client = Conn::open(target)?;
    client
        .write_all(&startup_packet("postgres", more))
        .map_err(|e| e.to_string())?;
    let messages = read_until(&mut client, b'Z')?;
    if !matches!(messages.last(), Some((b'Z', _))) {
        return Err(format!("login answered {messages:?}"));
    }
    Ok(client)
}

/// Everything the other side sends until it closes: its bytes, or why the read failed
/// (still open after [`READ_WAIT`], say).
fn until_closed(client: &mut impl Read) -> Result<Vec<u8>, String> {
    let mut got = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match client.read(&mut chunk) {
            Ok(0) => return Ok(got),
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(got),
            Err(e) => return Err(format!("not closed ({e}) after {} bytes", got.len())),
        }
    }
}

/// A `Q` whose length header claims [`HUGE`], then up to [`BEHIND`] bytes, from a
/// logged-in client: what it got back before the close.
fn huge_query(target: &Target) -> Result<Vec<u8>, String> {
    let mut client = logged_in(target, &[])?;
    let mut header = vec![b'Q'];
    header.extend_from_slice(&HUGE.to_be_bytes());
    client.write_all(&header).map_err(|e| e.to_string())?;
    let mut writer = client.try_clone()?;
    let sender = std::thread::spawn(move || {
        let block = vec![b' '; 1024 * 1024];
        let mut sent = 0;
        while sent < BEHIND && writer.write_all(&block).is_ok() {
            sent += block.len();
        }
        sent
    });
    let got = until_closed(&mut client);
    drop(client);
    let _ = sender.join();
    got
}

/// The high-water mark of a process's resident memory, in kB.
fn peak_kb(pid: u32) -> Result<u64, String> {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| e.to_string())?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| "no VmHWM".to_owned())
}

/// `pgoutput proxy` from the command line, in front of `server`: the child and its
/// address, once it said it listens.
fn cli_proxy(server: &Server, bin: &Path) -> Result<(Child, SocketAddr), String> {
    use std::io::BufRead;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let mut child = Command::new(bin)
        .args(["proxy", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--upstream", &upstream(server)])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let mut lines = std::io::BufReader::new(stderr).lines();
    match lines.next() {
        Some(Ok(line)) if line.contains("listening on") => {}
        other => {
            let _ = child.kill();
            return Err(format!("pgoutput proxy said {other:?}"));
        }
    }
    // The rest of its log is read (and dropped) so that it never blocks on it.
    std::thread::spawn(move || lines.for_each(drop));
    Ok((child, SocketAddr::from(([127, 0, 0, 1], port))))
}

/// The 2 GiB header, directly and through `pgoutput proxy`: both closed without a word
/// (PostgreSQL logs "invalid message length"), the proxy's peak memory grown by less than
/// 16 MB while 64 MB stood behind the header.
fn huge_length(server: &Server, bin: &Path) -> Result<String, String> {
    let direct = huge_query(&direct(server))?;
    let (mut child, addr) = cli_proxy(server, bin)?;
    let addr = Target::Tcp(addr);
    let pid = child.id();
    let result = (|| {
        // One ordinary login first: the proxy's memory as it serves a client.
        drop(logged_in(&addr, &[])?);
        let before = peak_kb(pid)?;
        let proxied = huge_query(&addr)?;
        let grown = peak_kb(pid)?.saturating_sub(before);
        Ok::<_, String>((proxied, grown))
    })();
    let _ = child.kill();
    let _ = child.wait();
    let (proxied, grown) = result?;
    if proxied != direct {
        return Err(format!(
            "a 2 GiB length header: PostgreSQL answered {direct:?}, through the proxy {proxied:?}"
        ));
    }
    if grown > 16 * 1024 {
        return Err(format!(
            "a 2 GiB length header grew the proxy by {grown} kB"
        ));
    }
    let log = std::fs::read_to_string(server.socket_dir().join("server.log")).unwrap_or_default();
    if !log.contains("invalid message length") {
        return Err("PostgreSQL did not log \"invalid message length\"".to_owned());
    }
    Ok(format!(
        "a 2 GiB length header closed as PostgreSQL closes it (\"invalid message length\", {} bytes of answer), the proxy grown by {grown} kB",
        direct.len()
    ))
}

/// 10,000 START_REPLICATIONs of made-up slots, each refused by the upstream (42704):
/// the proxy keeps state of no more slots than before.
fn made_up_slots(proxy: &Proxy) -> Result<String, String> {
    const COUNT: usize = 10_000;
    const BATCH: usize = 500;
    let before = proxy.known_slots();
    let mut client = logged_in(&Target::Tcp(proxy.addr()), &[("replication", "database")])?;
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for batch in 0..COUNT / BATCH {
        let mut queries = Vec::new();
        for _ in 0..BATCH {
            // xorshift: names no one made.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let text = format!(
                "START_REPLICATION SLOT made_up_{state:016x} LOGICAL 0/0 (proto_version '1', publication_names 'pub')\0"
            );
            queries.push(b'Q');
            queries.extend_from_slice(&((text.len() + 4) as u32).to_be_bytes());
            queries.extend_from_slice(text.as_bytes());
        }
        client.write_all(&queries).map_err(|e| e.to_string())?;
        for _ in 0..BATCH {
            let messages = read_until(&mut client, b'E')?;
            let code = messages
                .last()
                .map(|(_, body)| error_fields(body).1)
                .unwrap_or_default();
            if code != "42704" {
                return Err(format!("batch {batch}: answered {messages:?}"));
            }
            read_until(&mut client, b'Z')?;
        }
    }
    let after = proxy.known_slots();
    if after != before {
        return Err(format!(
            "{COUNT} START_REPLICATIONs of made-up slots: the proxy keeps {after} slots, {before} before"
        ));
    }
    Ok(format!(
        "{COUNT} START_REPLICATIONs of made-up slots, each 42704 from the upstream: the proxy keeps {after} slots, as before"
    ))
}

/// A client asked for its SCRAM response sends a START_REPLICATION of a slot the proxy
/// holds instead: directly and through the proxy, PostgreSQL's FATAL, and no PID told.
fn before_login(server: &Server, proxy: &Proxy, direct: &Target) -> Result<String, String> {
    let slot = "proxy_guard_held";
    create_slot(server, slot)?;
    proxy.hold_slot(slot, Duration::from_secs(600));
    let answer = |target: &Target| -> Result<Vec<u8>, String> {
        let mut client = Conn::open(target)?;
        client
            .write_all(&startup_packet(TAIL_USER.0, &[("replication", "database")]))
            .map_err(|e| e.to_string())?;
        // AuthenticationSASL: the server waits for the client's first SCRAM message.
        read_until(&mut client, b'R')?;
        let text = format!("START_REPLICATION SLOT {slot} LOGICAL 0/0\0");
        let mut query = vec![b'Q'];
        query.extend_from_slice(&((text.len() + 4) as u32).to_be_bytes());
        query.extend_from_slice(text.as_bytes());
        client.write_all(&query).map_err(|e| e.to_string())?;
        until_closed(&mut client)
    };
    let (from_server, through) = (answer(direct), answer(&Target::Tcp(proxy.addr())));
    drop_slot(server, slot);
    let (from_server, through) = (from_server?, through?);
    if from_server != through {
        return Err(format!(
            "a START_REPLICATION before login: PostgreSQL answered {:?}, through the proxy {:?}",
            String::from_utf8_lossy(&from_server),
            String::from_utf8_lossy(&through)
        ));
    }
    let (severity, code, message) = error_fields(through.get(5..).unwrap_or_default());
    if severity != "FATAL" || code != "08P01" {
        return Err(format!("answered {severity} {code} {message}"));
    }
    Ok(format!(
        "a START_REPLICATION of a held slot before login got PostgreSQL's own {severity} {code} \"{message}\""
    ))
}

/// A client that connects and sends nothing, and one that sends half a start-up packet:
/// each closed without a word after `authentication_timeout` (1 s here).
fn silent_client(proxy: &Proxy) -> Result<String, String> {
    for (what, bytes) in [
        ("nothing", &b""[..]),
        ("half a start-up packet", &[0, 0, 0, 40, 0, 3][..]),
    ] {
        let mut client = TcpStream::connect(proxy.addr()).map_err(|e| e.to_string())?;
        client
            .set_read_timeout(Some(READ_WAIT))
            .map_err(|e| e.to_string())?;
        client.write_all(bytes).map_err(|e| e.to_string())?;
        let got = until_closed(&mut client).map_err(|e| format!("a client sending {what}: {e}"))?;
        if !got.is_empty() {
            return Err(format!("a client sending {what} was told {got:?}"));
        }
    }
    if !proxy
        .log()
        .iter()
        .any(|l| l.contains("authentication_timeout"))
    {
        return Err(format!("nothing logged: {:?}", proxy.log()));
    }
    Ok("a client sending nothing, and one sending half a start-up packet, closed without a word after authentication_timeout".to_owned())
}

/// SSLRequest, `N`, SSLRequest again: PostgreSQL's FATAL, directly and through the proxy.
fn second_ssl_request(proxy: &Proxy, direct: &Target) -> Result<String, String> {
    let answer = |target: &Target| -> Result<Vec<u8>, String> {
        let mut client = Conn::open(target)?;
        let ssl_request = [0, 0, 0, 8, 0x04, 0xD2, 0x16, 0x2F];
        client.write_all(&ssl_request).map_err(|e| e.to_string())?;
        let mut first = [0u8; 1];
        client.read_exact(&mut first).map_err(|e| e.to_string())?;
        if first != *b"N" {
            return Err(format!("the first SSLRequest answered {first:?}"));
        }
        client.write_all(&ssl_request).map_err(|e| e.to_string())?;
        until_closed(&mut client)
    };
    let (from_server, through) = (answer(direct)?, answer(&Target::Tcp(proxy.addr()))?);
    // The fields a client reads: severity, SQLSTATE, message (not the server's source
    // file and line).
    let fields = |answer: &[u8]| error_fields(answer.get(5..).unwrap_or_default());
    if fields(&from_server) != fields(&through) || through.first() != Some(&b'E') {
        return Err(format!(
            "a second SSLRequest: PostgreSQL answered {:?}, through the proxy {:?}",
            String::from_utf8_lossy(&from_server),
            String::from_utf8_lossy(&through)
        ));
    }
    let (severity, code, message) = error_fields(through.get(5..).unwrap_or_default());
    Ok(format!(
        "a second SSLRequest got {severity} {code} \"{message}\" from both"
    ))
}

/// `max_connections` 4: four clients logged in, the fifth gets FATAL 53300 in
/// PostgreSQL's words; once one leaves, a new one logs in.
fn connection_limit(proxy: &Proxy) -> Result<String, String> {
    // The connections of the checks before are gone first.
    let deadline = std::time::Instant::now() + READ_WAIT;
    while proxy.connections() != 0 {
        if std::time::Instant::now() > deadline {
            return Err(format!("{} connections still open", proxy.connections()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let target = Target::Tcp(proxy.addr());
    let mut open = (0..4)
        .map(|_| logged_in(&target, &[]))
        .collect::<Result<Vec<_>, _>>()?;
    let mut fifth = TcpStream::connect(proxy.addr()).map_err(|e| e.to_string())?;
    fifth
        .set_read_timeout(Some(READ_WAIT))
        .map_err(|e| e.to_string())?;
    let got = until_closed(&mut fifth)?;
    let (severity, code, message) = error_fields(got.get(5..).unwrap_or_default());
    if (severity.as_str(), code.as_str(), message.as_str())
        != ("FATAL", "53300", "sorry, too many clients already")
    {
        return Err(format!("the fifth client got {severity} {code} {message}"));
    }
    drop(open.pop());
    let deadline = std::time::Instant::now() + READ_WAIT;
    while proxy.connections() != 3 {
        if std::time::Instant::now() > deadline {
            return Err(format!("{} connections open", proxy.connections()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(logged_in(&target, &[])?);
    Ok(format!(
        "past max_connections: {severity} {code} \"{message}\", and a place again once one left"
    ))
}
