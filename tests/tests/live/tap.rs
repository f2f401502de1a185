//! A recording relay: a TCP listener on 127.0.0.1 that forwards each connection, byte for
//! byte and nothing parsed, to a TCP address or a Unix socket, keeping what passed each
//! way. In front of the proxy it shows what a client got; behind it, what PostgreSQL sent;
//! alone, it is a TCP way to the server's Unix socket for clients that speak TCP only.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Where a [`Tap`] forwards to.
pub enum Target {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// One end of a forwarded connection.
enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Conn {
    fn connect(target: &Target) -> io::Result<Conn> {
        Ok(match target {
            Target::Tcp(addr) => Conn::Tcp(TcpStream::connect(addr)?),
            Target::Unix(path) => Conn::Unix(UnixStream::connect(path)?),
        })
    }

    fn try_clone(&self) -> io::Result<Conn> {
        Ok(match self {
            Conn::Tcp(s) => Conn::Tcp(s.try_clone()?),
            Conn::Unix(s) => Conn::Unix(s.try_clone()?),
        })
    }

    fn shutdown(&self, how: Shutdown) {
        let _ = match self {
            Conn::Tcp(s) => s.shutdown(how),
            Conn::Unix(s) => s.shutdown(how),
        };
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.read(buf),
            Conn::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(buf),
            Conn::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The bytes of one forwarded connection, each way.
#[derive(Debug, Default, Clone)]
pub struct Recording {
    /// Client to server.
    pub up: Vec<u8>,
    /// Server to client.
    pub down: Vec<u8>,
    /// Directions that have ended (2: the connection is over).
    pub ended: u8,
}

/// A byte-for-byte TCP relay on 127.0.0.1 that records what passes: each connection is
/// forwarded to `target` as read, nothing parsed. In front of the proxy it shows what a
/// client got; behind it, what PostgreSQL sent; alone, it is a TCP way to the server's
/// Unix socket for clients that speak TCP only (pgjdbc).
pub struct Tap {
    addr: SocketAddr,
    recordings: Arc<Mutex<Vec<Arc<Mutex<Recording>>>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Tap {
    pub fn start(target: Target) -> Result<Tap, String> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let recordings: Arc<Mutex<Vec<Arc<Mutex<Recording>>>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let recordings = Arc::clone(&recordings);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    let recording = Arc::new(Mutex::new(Recording::default()));
                    recordings
                        .lock()
                        .expect("recordings")
                        .push(Arc::clone(&recording));
                    let client = Conn::Tcp(client);
                    let pair = Conn::connect(&target).and_then(|server| {
                        Ok(((client.try_clone()?, server.try_clone()?), (server, client)))
                    });
                    let Ok(((client_read, server_write), (server_read, client_write))) = pair
                    else {
                        recording.lock().expect("recording").ended = 2;
                        continue;
                    };
                    let up = Arc::clone(&recording);
                    std::thread::spawn(move || pump(client_read, server_write, &up, true));
                    std::thread::spawn(move || pump(server_read, client_write, &recording, false));
                }
            })
        };
        Ok(Tap {
            addr,
            recordings,
            stop,
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every connection so far, in the order they came.
    pub fn recordings(&self) -> Vec<Recording> {
        self.recordings
            .lock()
            .expect("recordings")
            .iter()
            .map(|r| r.lock().expect("recording").clone())
            .collect()
    }

    /// How many connections are not over.
    pub fn open(&self) -> usize {
        self.recordings
            .lock()
            .expect("recordings")
            .iter()
            .filter(|r| r.lock().expect("recording").ended < 2)
            .count()
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept.
        let _ = TcpStream::connect(self.addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Copies one direction, recording it; at its end, the other side is told (FIN).
fn pump(mut from: Conn, mut to: Conn, recording: &Mutex<Recording>, up: bool) {
    let mut buf = vec![0; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        {
            let mut recording = recording.lock().expect("recording");
            let side = if up {
                &mut recording.up
            } else {
                &mut recording.down
            };
            side.extend_from_slice(&buf[..n]);
        }
        if to.write_all(&buf[..n]).is_err() {
            from.shutdown(Shutdown::Both);
            break;
        }
    }
    to.shutdown(Shutdown::Write);
    recording.lock().expect("recording").ended += 1;
}
