//! Where tail's lines go, and how far they are safely out: standard output (flushed after
//! each transaction) or a file (fsynced at an interval, and cut back to the last whole
//! transaction when a connection is lost).

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Stdout, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use pgoutput_codec::Lsn;

enum Sink {
    Stdout(BufWriter<Stdout>),
    File {
        writer: BufWriter<File>,
        /// `None` never fsyncs.
        fsync: Option<Duration>,
        last_sync: Instant,
        /// Bytes in the file, and at the end of the last whole transaction.
        len: u64,
        boundary: u64,
    },
}

/// The output and the two positions the server hears about: `written` (the end of the
/// last transaction, or idle position, handed to the output) and `confirmable` (what is
/// safely there: flushed to standard output, or fsynced to the file).
pub struct Output {
    sink: Sink,
    written: Lsn,
    confirmable: Lsn,
}

fn output_error(err: io::Error) -> String {
    format!("output: {err}")
}

impl Output {
    /// Standard output for `None` or `-`, else the file, appended to (created if needed).
    pub fn open(path: Option<&Path>, fsync_interval: u64) -> Result<Output, String> {
        let sink = match path {
            None => Sink::Stdout(BufWriter::new(io::stdout())),
            Some(path) if path == Path::new("-") => Sink::Stdout(BufWriter::new(io::stdout())),
            Some(path) => {
                let file = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                let len = file.metadata().map_err(output_error)?.len();
                Sink::File {
                    writer: BufWriter::new(file),
                    fsync: (fsync_interval > 0).then(|| Duration::from_secs(fsync_interval)),
                    last_sync: Instant::now(),
                    len,
                    boundary: len,
                }
            }
        };
        Ok(Output {
            sink,
            written: Lsn(0),
            confirmable: Lsn(0),
        })
    }

    /// The end of the last transaction (or idle position) handed to the output.
    pub fn written(&self) -> Lsn {
        self.written
    }

    /// What the slot may be confirmed up to.
    pub fn confirmable(&self) -> Lsn {
        self.confirmable
    }

    fn fsyncs(&self) -> bool {
        matches!(self.sink, Sink::File { fsync: Some(_), .. })
    }

    /// One line; `Ok(false)` when standard output has been closed.
    pub fn write_line(&mut self, line: &str) -> Result<bool, String> {
        let result = match &mut self.sink {
            Sink::Stdout(out) => out
                .write_all(line.as_bytes())
                .and_then(|()| out.write_all(b"\n")),
            Sink::File { writer, len, .. } => {
                *len += line.len() as u64 + 1;
                writer
                    .write_all(line.as_bytes())
                    .and_then(|()| writer.write_all(b"\n"))
            }
        };
        closed_is_false(result)
    }

    /// Hands buffered lines to the operating system; `Ok(false)` when standard output has
    /// been closed.
    pub fn flush(&mut self) -> Result<bool, String> {
        closed_is_false(match &mut self.sink {
            Sink::Stdout(out) => out.flush(),
            Sink::File { writer, .. } => writer.flush(),
        })
    }

    /// A transaction ending at `end` is complete on the output; `boundary` when no
    /// streamed transaction is open either (a place the file may be cut back to).
    pub fn finish_transaction(&mut self, end: Lsn, boundary: bool) -> Result<bool, String> {
        if !self.flush()? {
            return Ok(false);
        }
        self.written = self.written.max(end);
        if boundary {
            self.mark_boundary();
        }
        if !self.fsyncs() {
            self.confirmable = self.written;
        }
        Ok(true)
    }

    /// Nothing is open and the server has sent everything before `lsn`.
    pub fn idle_at(&mut self, lsn: Lsn) -> Result<bool, String> {
        if !self.flush()? {
            return Ok(false);
        }
        self.mark_boundary();
        // Nothing waits for an fsync: the idle position is as safe as the last one.
        if !self.fsyncs() || self.confirmable == self.written {
            self.confirmable = self.confirmable.max(lsn);
        }
        self.written = self.written.max(lsn);
        Ok(true)
    }

    fn mark_boundary(&mut self) {
        if let Sink::File { len, boundary, .. } = &mut self.sink {
            *boundary = *len;
        }
    }

    /// fsyncs the file if the interval has passed.
    pub fn sync_if_due(&mut self) -> Result<(), String> {
        match &self.sink {
            Sink::File {
                fsync: Some(interval),
                last_sync,
                ..
            } if last_sync.elapsed() >= *interval => self.sync(),
            _ => Ok(()),
        }
    }

    /// Makes everything written safe: fsyncs the file (if fsyncing at all).
    pub fn sync(&mut self) -> Result<(), String> {
        self.flush()?;
        if let Sink::File {
            writer,
            fsync: Some(_),
            last_sync,
            ..
        } = &mut self.sink
        {
            writer.get_ref().sync_data().map_err(output_error)?;
            *last_sync = Instant::now();
        }
        self.confirmable = self.written;
        Ok(())
    }

    /// After a lost connection: cuts what was written since the last whole transaction
    /// from the file (the server sends that transaction again, in full). `true` if there
    /// was something to cut. Standard output cannot be taken back.
    pub fn cut_unfinished(&mut self) -> io::Result<bool> {
        let Sink::File {
            writer,
            len,
            boundary,
            ..
        } = &mut self.sink
        else {
            return Ok(false);
        };
        writer.flush()?;
        if *len == *boundary {
            return Ok(false);
        }
        // Opened for appending: the next write goes to the new end.
        writer.get_ref().set_len(*boundary)?;
        *len = *boundary;
        Ok(true)
    }
}

fn closed_is_false(result: io::Result<()>) -> Result<bool, String> {
    match result {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(output_error(e)),
    }
}
