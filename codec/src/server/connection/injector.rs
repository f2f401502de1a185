//! The fault injector of one connection: the rules (`crate::faults`) asked before, within
//! and after each frame it sends, at its timers and at the client's status updates; and what
//! each action does to the connection.

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Closed, Connection, Failure};
use crate::faults::{error_for, frame_matches, Action, Facts, Point};
use crate::faults::{Scope, Tracker, Trigger};
use crate::server::state::Shared;
use crate::wire::backend;

/// What the fault rules keep of one stream: who it is for them, what it has sent, the
/// `time` rules' progress, the rules a status update met, a `slow` action in force.
#[derive(Debug)]
pub(super) struct StreamFaults {
    /// Who this connection is for the fault rules.
    pub(super) scope: Arc<Scope>,
    /// Where each frame it sends stands in the stream.
    pub(super) tracker: Tracker,
    /// When streaming began (the `time` trigger), the next `time` rule due (ms after),
    /// and how far the time rules have been looked at.
    pub(super) started: Instant,
    pub(super) next_fault_ms: Option<u64>,
    pub(super) time_checked: Option<u64>,
    /// Rules a status update met, done at the next point where only whole frames are
    /// buffered.
    pub(super) pending: Vec<(Trigger, Action)>,
    /// A `slow` action in force.
    pub(super) slow: Option<Slow>,
}

impl StreamFaults {
    pub(super) fn new(next_fault_ms: Option<u64>, scope: Scope, started: Instant) -> StreamFaults {
        StreamFaults {
            scope: Arc::new(scope),
            tracker: Tracker::default(),
            started,
            next_fault_ms,
            time_checked: None,
            pending: Vec::new(),
            slow: None,
        }
    }
}

/// How often a stall looks at the server's stop (and a crash).
const STALL_TICK: Duration = Duration::from_millis(50);

/// A `slow` action in force on a connection.
#[derive(Debug, Clone, Copy)]
pub(super) enum Slow {
    /// Each message waits this long before it goes.
    Delay(Duration),
    /// At most this many bytes a second.
    Rate(u64),
}

impl<W: Write> Connection<'_, W> {
    /// The rules at `point` of a frame whose bytes start at `frame_start` in the output:
    /// what was buffered before is written first (and the frame too once it is whole, or
    /// its first bytes for a mid-frame rule), then each action is done.
    pub(super) fn frame_faults(
        &mut self,
        point: Point,
        facts: &Facts,
        frame_start: usize,
    ) -> Result<(), Failure> {
        let scope = self.scope();
        let mut fired = self
            .shared
            .faults
            .fire(Some(&scope), |trigger| match point {
                Point::Within(_) => match trigger {
                    Trigger::Message { byte: Some(b), .. } => {
                        frame_matches(trigger, Point::Within(*b), facts)
                    }
                    _ => false,
                },
                point => frame_matches(trigger, point, facts),
            });
        if fired.is_empty() {
            return Ok(());
        }
        // Mid-frame rules in the order of their bytes.
        fired.sort_by_key(|(trigger, _)| match trigger {
            Trigger::Message { byte: Some(b), .. } => *b,
            _ => 0,
        });
        let mut written = 0;
        for (trigger, action) in fired {
            match (point, &trigger) {
                (Point::Within(_), Trigger::Message { byte: Some(b), .. }) => {
                    let upto = (frame_start + b - written).min(self.out.len());
                    self.flush_upto(upto)?;
                    written = frame_start + b;
                }
                _ => self.flush()?,
            }
            self.log_fault(&trigger, &action);
            self.apply(action)?;
        }
        Ok(())
    }

    /// The `time` rules whose moment has come, and the `flush` rules the client's last
    /// status update met: done where the output holds whole frames only.
    pub(super) fn due_faults(&mut self) -> Result<(), Failure> {
        let Some(walsnd) = &mut self.walsnd else {
            return Ok(());
        };
        let mut due = std::mem::take(&mut walsnd.faults.pending);
        if let Some(ms) = walsnd.faults.next_fault_ms {
            let elapsed =
                u64::try_from(walsnd.faults.started.elapsed().as_millis()).unwrap_or(u64::MAX);
            if elapsed >= ms {
                let checked = walsnd.faults.time_checked;
                walsnd.faults.time_checked = Some(elapsed);
                let scope = self.scope();
                due.extend(self.shared.faults.fire(Some(&scope), |trigger| {
                    matches!(trigger, Trigger::Time { ms } if *ms <= elapsed && checked.is_none_or(|c| *ms > c))
                }));
                let next = self.shared.faults.next_time(&scope, Some(elapsed));
                self.walsnd().faults.next_fault_ms = next;
            }
        }
        for (trigger, action) in due {
            self.flush()?;
            self.log_fault(&trigger, &action);
            self.apply(action)?;
        }
        Ok(())
    }

    /// When the next `time` rule is due, for the streaming loop's wait.
    pub(super) fn next_fault_time(&self) -> Option<Instant> {
        let walsnd = self.walsnd.as_ref()?;
        Some(walsnd.faults.started + Duration::from_millis(walsnd.faults.next_fault_ms?))
    }

    /// Who this connection is, for the rules' scopes (shared, not copied per frame).
    pub(super) fn scope(&self) -> Arc<Scope> {
        self.walsnd
            .as_ref()
            .map(|w| Arc::clone(&w.faults.scope))
            .unwrap_or_default()
    }

    fn log_fault(&self, trigger: &Trigger, action: &Action) {
        self.shared.log(format!(
            "client {}: fault: {action:?} at {trigger:?}",
            self.id
        ));
    }

    /// Does `action` to this connection. Actions that end it return the failure.
    fn apply(&mut self, action: Action) -> Result<(), Failure> {
        let ends = match action {
            Action::Crash => Some(crate::judge::Ending::Crash),
            Action::Close | Action::Reset | Action::Error { .. } => {
                Some(crate::judge::Ending::Fault)
            }
            _ => None,
        };
        if let (Some(how), Some(walsnd)) = (ends, &mut self.walsnd) {
            walsnd.ending.get_or_insert(how);
        }
        match action {
            Action::Close => {
                self.out.clear();
                if let Some(tcp) = self.tcp {
                    let _ = tcp.shutdown(Shutdown::Write);
                }
                Err(Closed::Silently("fault: closed".into()).into())
            }
            Action::Reset => {
                self.out.clear();
                Err(Closed::Reset.into())
            }
            Action::Stall { ms } => self.stall(ms.map(Duration::from_millis)),
            Action::Error { code, message } => Err(self.fault_error(&code, message)),
            Action::Shutdown => {
                self.walsnd().shutting_down = true;
                Ok(())
            }
            Action::RequestReply => Ok(self.keepalive(true)?),
            Action::Slow {
                delay_ms,
                bytes_per_second,
            } => {
                let slow = match (delay_ms, bytes_per_second) {
                    (Some(ms), _) => Slow::Delay(Duration::from_millis(ms)),
                    (None, Some(rate)) => Slow::Rate(rate.max(1)),
                    (None, None) => return Ok(()),
                };
                self.walsnd().faults.slow = Some(slow);
                Ok(())
            }
            Action::Crash => {
                self.out.clear();
                self.shared.crash();
                Err(Closed::Silently("fault: crash".into()).into())
            }
        }
    }

    /// Neither writes nor reads (the reader stops once the inbox is full), for `duration`
    /// or until the server stops or crashes.
    fn stall(&mut self, duration: Option<Duration>) -> Result<(), Failure> {
        let until = duration.map(|d| Instant::now() + d);
        let epoch = self.shared.lock().epoch();
        loop {
            if self.shared.stopping() {
                return Err(Closed::Shutdown.into());
            }
            if self.shared.lock().epoch() != epoch {
                return Err(Closed::Silently("crashed while stalled".into()).into());
            }
            let tick = match until {
                Some(until) => {
                    let now = Instant::now();
                    if now >= until {
                        return Ok(());
                    }
                    STALL_TICK.min(until - now)
                }
                None => STALL_TICK,
            };
            std::thread::sleep(tick);
        }
    }

    /// The ErrorResponse of an `error` action: FATAL (then the connection closes) for the
    /// 57P0x codes, else an ERROR that ends the streaming.
    fn fault_error(&mut self, code: &str, message: Option<String>) -> Failure {
        let (slot, xid) = self.walsnd.as_ref().map_or((String::new(), 0), |w| {
            (
                w.faults.scope.slot.clone().unwrap_or_default(),
                w.faults.tracker.xid().0,
            )
        });
        let err = error_for(code, message, &slot, self.shared.config.major, xid);
        if code.starts_with("57P0") {
            return self.fatal_with(&err).into();
        }
        err.into()
    }

    /// Paces the next message for a `slow` action: waits out the delay before it, or,
    /// at a byte rate, writes what is buffered and waits for the rate to allow more.
    pub(super) fn pace(&mut self) -> Result<(), Failure> {
        let Some(slow) = self.walsnd.as_ref().and_then(|w| w.faults.slow) else {
            return Ok(());
        };
        match slow {
            Slow::Delay(delay) => {
                self.flush()?;
                self.wait_replying(delay)
            }
            Slow::Rate(rate) => {
                // Chunks of a twentieth of a second's bytes.
                let chunk = usize::try_from(rate / 20).unwrap_or(usize::MAX).max(1);
                if self.out.len() < chunk {
                    return Ok(());
                }
                let bytes = self.out.len() as u64;
                self.flush()?;
                self.wait_replying(Duration::from_secs_f64(bytes as f64 / rate as f64))
            }
        }
    }

    /// Waits `duration` while reading the client's replies and keeping the timeouts (a
    /// slow walsender is still a walsender).
    fn wait_replying(&mut self, duration: Duration) -> Result<(), Failure> {
        let until = Instant::now() + duration;
        loop {
            self.receive_pending()?;
            self.check_timeout()?;
            let now = Instant::now();
            if now >= until || self.walsnd.as_ref().is_some_and(|w| w.done) {
                return Ok(());
            }
            std::thread::sleep(STALL_TICK.min(until - now));
        }
    }
}

/// The rules on a connection just accepted (`connect` triggers), before anything is read:
/// `false` when the connection is over.
pub(super) fn on_connect(shared: &Shared, stream: &TcpStream, actions: Vec<Action>) -> bool {
    for action in actions {
        shared.log(format!("connection: fault: {action:?} on connect"));
        match action {
            Action::Close => {
                let _ = stream.shutdown(Shutdown::Both);
                return false;
            }
            Action::Reset => {
                reset(stream);
                return false;
            }
            Action::Stall { ms } => {
                let until = ms.map(|ms| Instant::now() + Duration::from_millis(ms));
                while !shared.stopping() && until.is_none_or(|u| Instant::now() < u) {
                    std::thread::sleep(STALL_TICK);
                }
                if shared.stopping() {
                    return false;
                }
            }
            Action::Error { code, message } => {
                // Before the start-up packet every error is FATAL, and no slot is known.
                let err = error_for(&code, message, "", shared.config.major, 0);
                let mut out = Vec::new();
                backend::error_response(&mut out, "FATAL", &err);
                let mut writer = stream;
                let _ = writer.write_all(&out);
                let _ = stream.shutdown(Shutdown::Both);
                return false;
            }
            Action::Crash => {
                shared.crash();
                let _ = stream.shutdown(Shutdown::Both);
                return false;
            }
            // Refused when the rule is added: they need a streaming connection.
            Action::Shutdown | Action::RequestReply | Action::Slow { .. } => {}
        }
    }
    true
}

/// Makes closing `stream` send RST instead of FIN (a linger of zero), and wakes its
/// reader without sending anything: the caller must not shut down its writing side.
pub(super) fn reset(stream: &TcpStream) {
    let _ = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
    let _ = stream.shutdown(Shutdown::Read);
}
