//! The fault injector of one connection: the rules (`crate::faults`) asked before, within
//! and after each frame it sends, at its timers and at the client's status updates; and what
//! each action does to the connection.

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Closed, Connection, Failure};
use crate::faults::{Action, Course, Effect, End, OnConnect, Scope, Step, Trigger};
use crate::judge::Probe;
use crate::server::state::Shared;
use pgoutput_wire::backend;

/// How often a stall looks at the server's stop (and a crash).
const STALL_TICK: Duration = Duration::from_millis(50);

impl<W: Write> Connection<'_, W> {
    /// Walks a frame's course (see [`Course`]): what is buffered goes before each rule's
    /// action (and the frame's bytes the rule names), `push` puts the frame in the
    /// output when its bytes are due, a `slow` action's wait keeps reading the client.
    /// The probe's hold, if the frame has one, is the caller's, after the due rules.
    pub(super) fn frame_course(
        &mut self,
        mut course: Course,
        push: impl FnOnce(&mut Self),
    ) -> Result<Option<Probe>, Failure> {
        let mut push = Some(push);
        // Where the frame's bytes not written yet start in the output, and how many of
        // them have been written, once it is there.
        let mut frame: Option<(usize, usize)> = None;
        let mut held = None;
        loop {
            let plan = &self.shared.faults;
            let Some(step) = course.next(&mut self.walsnd().faults, plan) else {
                break;
            };
            match step {
                Step::Act(fired, effect) => {
                    let upto = fired.upto;
                    let n = match &mut frame {
                        None => self.out.len(),
                        Some((at, gone)) => {
                            let n = *at + upto.saturating_sub(*gone);
                            (*at, *gone) = (0, (*gone).max(upto));
                            n
                        }
                    };
                    self.flush_upto(n.min(self.out.len()))?;
                    self.fault(&fired.trigger, &fired.action, effect)?;
                }
                Step::Wait(wait) => {
                    self.flush()?;
                    self.wait_replying(wait)?;
                }
                Step::Frame => {
                    frame = Some((self.out.len(), 0));
                    if let Some(push) = push.take() {
                        push(self);
                    }
                }
                Step::Hold(probe) => held = Some(probe),
            }
        }
        Ok(held)
    }

    /// The `time` rules whose moment has come, and the `flush` rules the client's last
    /// status update met: done where the output holds whole frames only.
    pub(super) fn due_faults(&mut self) -> Result<(), Failure> {
        let Some(walsnd) = &mut self.walsnd else {
            return Ok(());
        };
        let mut due = std::mem::take(&mut walsnd.pending_faults);
        due.extend(walsnd.faults.due(&self.shared.faults, Instant::now()));
        for (trigger, action) in due {
            self.flush()?;
            let major = self.shared.config.major;
            let effect = self.walsnd().faults.fire(&action, major);
            self.fault(&trigger, &action, effect)?;
        }
        Ok(())
    }

    /// When the next `time` rule is due, for the streaming loop's wait.
    pub(super) fn next_fault_time(&mut self) -> Option<Instant> {
        let faults = &mut self.walsnd.as_mut()?.faults;
        faults.next_time(&self.shared.faults)
    }

    /// Who this connection is, for the rules' scopes (shared, not copied per frame).
    pub(super) fn scope(&self) -> Arc<Scope> {
        self.walsnd
            .as_ref()
            .map(|w| Arc::clone(&w.faults.scope))
            .unwrap_or_default()
    }

    /// Does what `action`, fired at `trigger`, asks of this connection (its `effect`).
    /// Actions that end it return the failure.
    fn fault(&mut self, trigger: &Trigger, action: &Action, effect: Effect) -> Result<(), Failure> {
        self.shared.log(format!(
            "client {}: fault: {action:?} at {trigger:?}",
            self.id
        ));
        if let Some(how) = effect.ending() {
            self.walsnd().ending.get_or_insert(how);
        }
        match effect {
            Effect::End(End::Fin) => {
                // The FIN goes when the connection is over, after its slot is released, as
                // a walsender's socket closes only once its exit has released the slot: a
                // client that reconnects at the end of the connection finds it free.
                self.out.clear();
                Err(Closed::Silently("fault: closed".into()).into())
            }
            Effect::End(End::Rst) => {
                self.out.clear();
                Err(Closed::Reset.into())
            }
            Effect::End(End::Crash) => {
                self.out.clear();
                self.shared.crash();
                Err(Closed::Silently("fault: crash".into()).into())
            }
            Effect::Pause(how_long) => self.stall(how_long),
            Effect::Error { error, fatal: true } => Err(self.fatal_with(&error).into()),
            Effect::Error {
                error,
                fatal: false,
            } => Err(error.into()),
            Effect::Shutdown => {
                self.walsnd()
                    .shutting_down
                    .get_or_insert(crate::faults::Shutdown::Finishing);
                Ok(())
            }
            Effect::RequestReply => Ok(self.keepalive(true)?),
            Effect::Send(bytes) => {
                self.out.extend_from_slice(&bytes);
                Ok(())
            }
            // The stream's faults keep it.
            Effect::Pace(_) => Ok(()),
        }
    }

    /// Neither writes nor reads (the reader stops once the inbox is full), for `duration`
    /// or until the server stops or crashes, or the client leaves (the connection, and
    /// its hold on the slot, end with it, as the proxy's stall ends with its client).
    fn stall(&mut self, duration: Option<Duration>) -> Result<(), Failure> {
        let until = duration.map(|d| Instant::now() + d);
        let epoch = self.shared.lock().epoch();
        loop {
            if self.shared.stopping() {
                return Err(Closed::Shutdown.into());
            }
            if self.inbox.client_left() {
                return Err(Closed::ByClient.into());
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
pub(super) fn on_connect(
    shared: &Shared,
    stream: &TcpStream,
    rules: Vec<(Action, OnConnect)>,
) -> bool {
    for (action, effect) in rules {
        shared.log(format!("connection: fault: {action:?} on connect"));
        match effect {
            OnConnect::End(End::Fin) => {
                let _ = stream.shutdown(Shutdown::Both);
                return false;
            }
            OnConnect::End(End::Rst) => {
                reset(stream);
                return false;
            }
            OnConnect::End(End::Crash) => {
                shared.crash();
                let _ = stream.shutdown(Shutdown::Both);
                return false;
            }
            OnConnect::Pause(how_long) => {
                let until = how_long.map(|d| Instant::now() + d);
                while !shared.stopping() && until.is_none_or(|u| Instant::now() < u) {
                    std::thread::sleep(STALL_TICK);
                }
                if shared.stopping() {
                    return false;
                }
            }
            OnConnect::Fatal(err) => {
                let mut out = Vec::new();
                backend::error_response(&mut out, "FATAL", &err);
                let mut writer = stream;
                let _ = writer.write_all(&out);
                let _ = stream.shutdown(Shutdown::Both);
                return false;
            }
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
