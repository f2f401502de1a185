//! What the connections of one server share: the settings, the WAL (the script's events,
//! shared by every client instead of copied), the slots, the clients' records and the log,
//! each changed through a method here rather than by the connection code.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::catalog::Catalog;
use super::inbox::Inbox;
use super::script::{Clock, End, Event};
use super::sent::{SentMessage, Unrecorded};
use super::{Auth, ClientInfo, Logger, SlotInfo};
use crate::faults::Plan;
use crate::judge::{Judge, Judges, ProbeSwitch};
use crate::wire::error::{error, sqlstate, SqlError};
use crate::wire::Socket;
use crate::{Lsn, StandbyStatusUpdate, Xid};

/// The server's settings, fixed when it starts.
pub(crate) struct Config {
    pub server_version: String,
    pub major: u32,
    pub system_identifier: u64,
    pub database: String,
    pub auth: Auth,
    /// Ours, not PostgreSQL's: how long a streaming connection may go without a message
    /// before it gets a keepalive (without a reply request).
    pub keepalive_interval: Duration,
    /// PostgreSQL's `wal_sender_timeout` (`None`: 0, off).
    pub wal_sender_timeout: Option<Duration>,
    /// PostgreSQL's `authentication_timeout`.
    pub authentication_timeout: Duration,
    /// PostgreSQL's `max_wal_senders`.
    pub max_wal_senders: usize,
    pub max_replication_slots: usize,
    /// PostgreSQL's `checkpoint_timeout`: how often slots' positions are persisted.
    pub checkpoint_interval: Duration,
    pub logger: Option<Logger>,
}

/// A slot held by a walsender that has not exited yet (55006 for whoever asks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hold {
    /// The client whose process id the error names (0: none of ours).
    pub client: usize,
    /// Until when; `None` while the client still streams (the hold starts when it leaves).
    pub until: Option<Instant>,
    pub duration: Duration,
}

/// One event of the WAL, with the transaction it needs to be rendered: for a
/// [`Event::StreamProgress`] the streamed transaction (once it has ended), for `COMMIT` /
/// `ROLLBACK PREPARED` the prepared one.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub event: Arc<Event>,
    pub partner: Option<Arc<Event>>,
}

/// The WAL: events only ever appended, each shared by every connection that streams it.
#[derive(Debug)]
pub(crate) struct Wal {
    entries: Vec<Entry>,
    clock: Clock,
    start_lsn: Lsn,
    end: Lsn,
    /// The latest prepared transaction of each gid.
    prepared: HashMap<String, Arc<Event>>,
    /// Stream progress events waiting for their transaction's end, by xid.
    progress: HashMap<Xid, Vec<usize>>,
}

impl Wal {
    pub(crate) fn new(start_lsn: Lsn, clock: Clock) -> Wal {
        Wal {
            entries: Vec::new(),
            clock,
            start_lsn,
            end: start_lsn,
            prepared: HashMap::new(),
            progress: HashMap::new(),
        }
    }

    /// Appends an event whose positions are filled in.
    pub(crate) fn push(&mut self, event: Event) {
        self.end = self.end.max(event.end_lsn());
        let index = self.entries.len();
        let event = Arc::new(event);
        let partner = match &*event {
            Event::CommitPrepared { gid, .. } | Event::RollbackPrepared { gid, .. } => {
                self.prepared.get(gid).cloned()
            }
            Event::StreamProgress { xid, .. } => {
                self.progress.entry(*xid).or_default().push(index);
                None
            }
            Event::Transaction(t) => {
                if let End::Prepare { gid } = &t.end {
                    self.prepared.insert(gid.clone(), Arc::clone(&event));
                }
                for waiting in self.progress.remove(&t.xid).unwrap_or_default() {
                    self.entries[waiting].partner = Some(Arc::clone(&event));
                }
                None
            }
            Event::Message(_) | Event::WalPosition { .. } => None,
        };
        self.entries.push(Entry { event, partner });
    }

    /// Up to `max` entries from `index` on (cheap: each is two reference counts).
    pub(crate) fn entries(&self, index: usize, max: usize) -> Vec<Entry> {
        let end = self.entries.len().min(index.saturating_add(max));
        self.entries.get(index..end).unwrap_or_default().to_vec()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The end of the WAL: the end of the last event (or where it starts).
    pub(crate) fn end(&self) -> Lsn {
        self.end
    }

    pub(crate) fn start_lsn(&self) -> Lsn {
        self.start_lsn
    }

    pub(crate) fn clock(&self) -> Clock {
        self.clock
    }

    pub(crate) fn set_clock(&mut self, clock: Clock) {
        self.clock = clock;
    }

    /// The gids prepared and not yet committed or rolled back.
    pub(crate) fn prepared_gids(&self) -> std::collections::HashSet<String> {
        let mut finished = std::collections::HashSet::new();
        for entry in &self.entries {
            if let Event::CommitPrepared { gid, .. } | Event::RollbackPrepared { gid, .. } =
                &*entry.event
            {
                finished.insert(gid.clone());
            }
        }
        self.prepared
            .keys()
            .filter(|gid| !finished.contains(*gid))
            .cloned()
            .collect()
    }

    pub(crate) fn events(&self) -> impl Iterator<Item = &Event> {
        self.entries.iter().map(|e| &*e.event)
    }
}

/// The slots, the clients' records and the log.
pub(crate) struct State {
    pub slots: Vec<SlotInfo>,
    pub clients: Vec<ClientInfo>,
    pub log: Vec<String>,
    /// Live connections: their inbox (to wake them) and a handle on their socket (to
    /// shut it down when the server stops).
    connections: Vec<(usize, Arc<Inbox>, Option<Socket>)>,
    /// Connections that are walsenders (sent `replication` in their start-up packet).
    walsenders: usize,
    /// How many crashes the server has had: a status update read before a crash must not
    /// move a slot after it.
    pub epoch: u64,
    /// What each slot's consumer did, judged across its connections.
    judges: Judges,
}

/// How many log lines, disconnected clients' records, and commands and status updates
/// per client the server keeps, dropping the oldest: a `pgoutput serve` that runs for
/// days (or a fuzzer's millions of connections) must not grow without bound.
pub(crate) const MAX_LOG_LINES: usize = 10_000;
pub(crate) const MAX_CLIENT_RECORDS: usize = 1_000;
pub(crate) const MAX_PER_CLIENT: usize = 10_000;

/// Appends to a record list, dropping the oldest tenth when it is full.
fn push_bounded<T>(list: &mut Vec<T>, item: T, max: usize) {
    if list.len() >= max {
        list.drain(..max / 10);
    }
    list.push(item);
}

impl State {
    pub(crate) fn new() -> State {
        State {
            slots: Vec::new(),
            clients: Vec::new(),
            log: Vec::new(),
            connections: Vec::new(),
            walsenders: 0,
            epoch: 0,
            judges: Judges::default(),
        }
    }

    /// Registers a new client, forgetting the oldest disconnected ones beyond the limit.
    pub(crate) fn add_client(&mut self, client: ClientInfo) {
        let disconnected = self.clients.iter().filter(|c| !c.connected).count();
        if disconnected >= MAX_CLIENT_RECORDS {
            let mut excess = disconnected - MAX_CLIENT_RECORDS + MAX_CLIENT_RECORDS / 10;
            self.clients.retain(|c| {
                let drop = !c.connected && excess > 0;
                excess -= usize::from(drop);
                !drop
            });
        }
        self.clients.push(client);
    }

    /// Records a command of client `id`.
    pub(crate) fn add_command(&mut self, id: usize, command: &str) {
        if let Some(client) = self.client(id) {
            push_bounded(&mut client.commands, command.to_owned(), MAX_PER_CLIENT);
        }
    }

    /// Tells `slot`'s judge and client `id`'s record of the frames sent since they last
    /// heard, then gives the judge for what comes next.
    pub(crate) fn record_frames(
        &mut self,
        id: usize,
        slot: &str,
        frames: &mut Vec<Unrecorded>,
    ) -> &mut Judge {
        if let Some(client) = self.clients.iter_mut().find(|c| c.id == id) {
            for frame in frames.iter() {
                let message = SentMessage {
                    tag: frame.tag,
                    lsn: frame.lsn,
                };
                push_bounded(&mut client.sent, message, MAX_PER_CLIENT);
            }
        }
        let judge = self.judge(slot);
        for frame in frames.drain(..) {
            judge.frame_sent(id as u64, frame.lsn, frame.opens, frame.end);
        }
        judge
    }

    /// Records a keepalive client `id` was sent.
    pub(crate) fn add_keepalive(&mut self, id: usize, wal_end: Lsn) {
        if let Some(client) = self.client(id) {
            let message = SentMessage {
                tag: b'k',
                lsn: wal_end,
            };
            push_bounded(&mut client.sent, message, MAX_PER_CLIENT);
        }
    }

    /// Records how long client `id` took to answer a reply request.
    pub(crate) fn add_reply(&mut self, id: usize, waited: Duration) {
        if let Some(client) = self.client(id) {
            push_bounded(&mut client.replies, waited, MAX_PER_CLIENT);
        }
    }

    /// The judge of `slot`.
    pub(crate) fn judge(&mut self, slot: &str) -> &mut Judge {
        self.judges.slot(slot)
    }

    /// Every slot's judge.
    pub(crate) fn judges(&self) -> &Judges {
        &self.judges
    }

    /// Records a standby status update of client `id`.
    pub(crate) fn add_status_update(&mut self, id: usize, update: StandbyStatusUpdate) {
        if let Some(client) = self.client(id) {
            push_bounded(&mut client.status_updates, update, MAX_PER_CLIENT);
        }
    }

    pub(crate) fn client(&mut self, id: usize) -> Option<&mut ClientInfo> {
        self.clients.iter_mut().find(|c| c.id == id)
    }

    pub(crate) fn slot(&mut self, name: &str) -> Option<&mut SlotInfo> {
        self.slots.iter_mut().find(|s| s.name == name)
    }

    /// Takes `slot` for client `id`, as `ReplicationSlotAcquire` and
    /// `StartLogicalReplication` do: refused while another client has it (a TEMPORARY slot
    /// is its creator's for its whole life, a held one its old walsender's), and when it
    /// was invalidated.
    pub(crate) fn acquire(
        &mut self,
        slot: &str,
        id: usize,
        major: u32,
    ) -> Result<&mut SlotInfo, SqlError> {
        let Some(holder) = self.holder(slot) else {
            return Err(error(
                sqlstate::UNDEFINED_OBJECT,
                format!("replication slot \"{slot}\" does not exist"),
            ));
        };
        if let Some(other) = holder.filter(|other| *other != id) {
            return Err(in_use(slot, other));
        }
        let info = self.slot(slot).expect("the slot exists");
        if info.invalidated {
            return Err(crate::wire::error::slot_invalidated(slot, major));
        }
        info.active_client = Some(id);
        info.starts += 1;
        Ok(info)
    }

    /// Whose `slot` is: `None` when there is no such slot, `Some(None)` when it is free,
    /// else the client streaming from it, owning it (TEMPORARY) or holding it.
    pub(crate) fn holder(&mut self, slot: &str) -> Option<Option<usize>> {
        let info = self.slot(slot)?;
        if let Some(Hold {
            until: Some(until), ..
        }) = info.held
        {
            if Instant::now() >= until {
                info.held = None;
            }
        }
        let held = info.held.filter(|h| h.until.is_some()).map(|h| h.client);
        Some(info.active_client.or(info.temporary_owner).or(held))
    }

    /// Holds `slot` for `duration`: from now, or, while a client streams from it, from
    /// when that client leaves (as when its walsender has not exited yet).
    pub(crate) fn hold(&mut self, slot: &str, duration: Duration) -> bool {
        let Some(info) = self.slot(slot) else {
            return false;
        };
        info.held = Some(match info.active_client {
            Some(client) => Hold {
                client,
                until: None,
                duration,
            },
            None => Hold {
                client: 0,
                until: Some(Instant::now() + duration),
                duration,
            },
        });
        true
    }

    /// A checkpoint: every slot's confirmed position is persisted.
    pub(crate) fn checkpoint(&mut self) {
        for slot in &mut self.slots {
            slot.persisted_lsn = slot.confirmed_flush_lsn;
        }
    }

    /// A crash and restart: every slot goes back to its persisted position, TEMPORARY
    /// slots are gone, and every connection is cut.
    pub(crate) fn crash(&mut self) {
        self.epoch += 1;
        self.judges.crash();
        self.slots.retain(|s| s.temporary_owner.is_none());
        for slot in &mut self.slots {
            slot.confirmed_flush_lsn = slot.persisted_lsn;
            slot.active_client = None;
            slot.held = None;
        }
        self.shutdown_sockets();
        self.wake_all();
    }

    /// Gives `slot` back, unless it is client `id`'s TEMPORARY slot (which stays its own).
    pub(crate) fn release(&mut self, slot: &str, id: usize) {
        if let Some(info) = self.slot(slot) {
            if info.active_client == Some(id) && info.temporary_owner != Some(id) {
                let_go(info);
            }
        }
    }

    /// Moves `slot`'s confirmed position forward (never back); the new position when it
    /// moved. A status update from before a crash (`epoch`) moves nothing.
    pub(crate) fn confirm(&mut self, slot: &str, flush: Lsn, epoch: u64) -> Option<Lsn> {
        if epoch != self.epoch {
            return None;
        }
        let info = self.slot(slot)?;
        (flush > info.confirmed_flush_lsn).then(|| {
            info.confirmed_flush_lsn = flush;
            flush
        })
    }

    /// Registers a live connection.
    pub(crate) fn connect(&mut self, id: usize, inbox: Arc<Inbox>, socket: Option<Socket>) {
        self.connections.push((id, inbox, socket));
    }

    /// Counts client `id` as a walsender, if fewer than `max` are: PostgreSQL's
    /// `max_wal_senders`, checked when the start-up packet asks for replication.
    pub(crate) fn add_walsender(&mut self, max: usize) -> bool {
        if self.walsenders >= max {
            return false;
        }
        self.walsenders += 1;
        true
    }

    /// Forgets connection `id`: its slots are released, its TEMPORARY slots dropped.
    pub(crate) fn disconnect(&mut self, id: usize, walsender: bool, why: String) {
        if let Some(client) = self.client(id) {
            client.connected = false;
            client.ended = Some(why);
        }
        for slot in &mut self.slots {
            if slot.active_client == Some(id) {
                let_go(slot);
            }
        }
        self.slots.retain(|s| s.temporary_owner != Some(id));
        self.connections.retain(|(client, ..)| *client != id);
        if walsender {
            self.walsenders -= 1;
        }
    }

    /// Wakes every connection (new WAL, or the server stops).
    pub(crate) fn wake_all(&self) {
        for (_, inbox, _) in &self.connections {
            inbox.wake();
        }
    }

    /// Shuts down every connection's socket: blocked reads and writes return.
    pub(crate) fn shutdown_sockets(&mut self) {
        for (_, _, socket) in &self.connections {
            if let Some(socket) = socket {
                let _ = socket.shutdown();
            }
        }
    }

    pub(crate) fn connection_count(&self) -> usize {
        self.connections.len()
    }
}

/// The error for a slot another client holds.
pub(crate) fn in_use(slot: &str, client: usize) -> SqlError {
    crate::wire::error::slot_in_use(slot, pid(client))
}

/// A slot's client lets it go: a hold waiting for that starts now.
fn let_go(slot: &mut SlotInfo) {
    slot.active_client = None;
    if let Some(hold) = &mut slot.held {
        if hold.until.is_none() {
            hold.until = Some(Instant::now() + hold.duration);
        }
    }
}

/// A client's process id, as BackendKeyData and "active for PID" report it.
pub(crate) fn pid(client: usize) -> usize {
    10_000 + client
}

/// Everything the connections share.
pub(crate) struct Shared {
    pub config: Config,
    pub catalog: Arc<Catalog>,
    wal: Mutex<Wal>,
    state: Mutex<State>,
    /// Signalled when a slot or a client record changes.
    pub changed: Condvar,
    stop: AtomicBool,
    /// A fast shutdown is under way: idle sessions end, walsenders finish as
    /// `WalSndDone` does, new connections are refused.
    finishing: AtomicBool,
    next_client: AtomicUsize,
    /// The fault rules.
    pub faults: Plan,
    /// The judge's probe, when armed.
    pub probe: ProbeSwitch,
    /// Connections accepted so far (the `connect` trigger's attempts).
    attempts: AtomicU64,
    /// START_REPLICATIONs so far, on any slot.
    starts: AtomicU64,
    /// The connection threads, joined at shutdown.
    pub threads: Mutex<Vec<JoinHandle<()>>>,
}

/// Locks a mutex even when a thread panicked holding it: a panicking client thread must
/// not take the server down with it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub(crate) fn new(config: Config, catalog: Catalog, wal: Wal) -> Shared {
        Shared {
            config,
            catalog: Arc::new(catalog),
            wal: Mutex::new(wal),
            state: Mutex::new(State::new()),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            finishing: AtomicBool::new(false),
            next_client: AtomicUsize::new(1),
            faults: Plan::default(),
            probe: ProbeSwitch::default(),
            attempts: AtomicU64::new(0),
            starts: AtomicU64::new(0),
            threads: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    pub(crate) fn wal(&self) -> MutexGuard<'_, Wal> {
        lock(&self.wal)
    }

    pub(crate) fn wal_end(&self) -> Lsn {
        self.wal().end()
    }

    pub(crate) fn next_client_id(&self) -> usize {
        self.next_client.fetch_add(1, Ordering::SeqCst)
    }

    /// Counts an accepted connection: its number (from 1).
    pub(crate) fn next_attempt(&self) -> u64 {
        self.attempts.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Counts a START_REPLICATION: its number on the server (from 1).
    pub(crate) fn next_start(&self) -> u64 {
        self.starts.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The server crashes and restarts (see [`State::crash`]).
    pub(crate) fn crash(&self) {
        self.lock().crash();
        self.log("crash: every connection dropped, slots back at their persisted positions".into());
        self.notify();
    }

    /// Starts PostgreSQL's fast shutdown (see [`Shared::finishing`]).
    pub(crate) fn finish(&self) {
        self.finishing.store(true, Ordering::SeqCst);
        self.lock().wake_all();
        self.changed.notify_all();
    }

    pub(crate) fn finishing(&self) -> bool {
        self.finishing.load(Ordering::SeqCst)
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Marks the server as stopping and wakes every connection.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.lock().wake_all();
        self.changed.notify_all();
    }

    /// Tells waiters on slots and client records that something changed.
    pub(crate) fn notify(&self) {
        self.changed.notify_all();
    }

    pub(crate) fn log(&self, line: String) {
        if let Some(logger) = &self.config.logger {
            logger(&line);
        }
        push_bounded(&mut self.lock().log, line, MAX_LOG_LINES);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(id: usize, connected: bool) -> ClientInfo {
        ClientInfo {
            id,
            user: "u".into(),
            application_name: String::new(),
            commands: Vec::new(),
            stream_options: Vec::new(),
            status_updates: Vec::new(),
            connected,
            sent: Vec::new(),
            replies: Vec::new(),
            ended: None,
        }
    }

    #[test]
    fn records_stay_bounded() {
        let mut state = State::new();
        state.add_client(client(0, true));
        for id in 1..5_000 {
            state.add_client(client(id, false));
        }
        assert!(state.clients.len() <= MAX_CLIENT_RECORDS + 1);
        // The connected client is never forgotten, and the newest are kept.
        assert_eq!(state.clients[0].id, 0);
        assert_eq!(state.clients.last().unwrap().id, 4_999);
        for n in 0..25_000 {
            state.add_command(0, &format!("SELECT {n}"));
        }
        let commands = &state.clients[0].commands;
        assert!(commands.len() <= MAX_PER_CLIENT);
        assert_eq!(commands.last().unwrap(), "SELECT 24999");
    }

    #[test]
    fn walsenders_are_counted_up_to_the_limit() {
        let mut state = State::new();
        assert!(state.add_walsender(2));
        assert!(state.add_walsender(2));
        assert!(!state.add_walsender(2));
        state.disconnect(7, true, String::new());
        assert!(state.add_walsender(2));
    }
}
