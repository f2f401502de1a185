//! The HTTP/JSON control API of `pgoutput serve --control`: what a test suite in any
//! language (curl is enough) needs to drive the test server: append transactions, arm
//! and clear fault rules, read slots and clients (findings included), wait for a slot to
//! reach a position, checkpoint, crash, shut down, set a slot's state.
//!
//! | request | body | answer |
//! |---|---|---|
//! | `POST /events` | JSON lines, as `--script` | `{"wal_end": "0/1000360"}` |
//! | `GET /faults` | | `[{"rule": {…}, "fired": 0}]` |
//! | `POST /faults` | a rule, or an array of rules (as in `--config`) | `{"armed": 1}` |
//! | `DELETE /faults` | | `{}` |
//! | `GET /slots` | | `[{"name", "confirmed_flush_lsn", "persisted_lsn", "active", …}]` |
//! | `GET /clients` | | `[{"id", "application_name", "sent", "status_updates", "findings", …}]` |
//! | `POST /wait` | `{"slot": "s", "lsn": "0/1000360", "timeout_ms": 5000}` | `{"confirmed_flush_lsn"}`, or 408 |
//! | `POST /checkpoint`, `POST /crash` | | `{}` |
//! | `POST /shutdown` | | 202; PostgreSQL's fast shutdown, then the server stops |
//! | `POST /slots/NAME/invalidate` | | `{}`, or 404 |
//! | `POST /slots/NAME/hold` | `{"ms": 2000}` | `{}`, or 404 |
//! | `DELETE /slots/NAME` | | `{}`, or 404 |
//!
//! Errors are `{"error": "…"}` with a 4xx status. One request per connection
//! (`Connection: close`), each on a thread of its own, so a `POST /wait` holds no one up.

use std::io::{self, BufReader};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::{ClientInfo, Script, SlotInfo, TestServer};
use crate::confirmed::Timeout;
use crate::control::{bad, Answer, Api, Control, Request, SlotState};
use crate::faults::Fault;
use crate::judge::{Fact, Finding, Positions, Probe};
use pgoutput_codec::Lsn;

impl Control {
    /// Serves the control API of `server` on `addr`, which must be a loopback address
    /// unless `remote` says otherwise (the API can crash the server and read what its
    /// clients did: it is for a test machine, not a network).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a non-loopback address without `remote`, else the error of
    /// binding the socket.
    pub fn start(server: Arc<TestServer>, addr: SocketAddr, remote: bool) -> io::Result<Control> {
        Control::serve(Arc::new(Serve(server)), addr, remote)
    }
}

/// The test server's API.
struct Serve(Arc<TestServer>);

impl Api for Serve {
    fn endpoints(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("POST /events", "append events (JSON lines, as --script); answers the WAL end"),
            ("GET /slots", "each slot: confirmed and persisted positions, the WAL end, what its clients were sent, its state"),
            ("GET /clients", "each client: commands, options, status updates, messages sent, reply delays, how it ended"),
            ("POST /checkpoint", "persist every slot's position now"),
            ("POST /crash", "drop every connection; slots back to their last checkpoint"),
            ("POST /shutdown", "PostgreSQL's fast shutdown; the server stops"),
        ]
    }

    fn route(&self, request: &Request) -> Option<Answer> {
        route(&self.0, request)
    }

    fn faults(&self) -> Vec<(Fault, u64)> {
        self.0.faults()
    }

    fn add_fault(&self, fault: Fault) {
        // Checked before.
        let _ = self.0.add_fault(fault);
    }

    fn clear_faults(&self) {
        self.0.clear_faults();
    }

    fn wait_for_confirmed_flush(
        &self,
        slot: &str,
        lsn: Lsn,
        timeout: Duration,
    ) -> Result<Lsn, Timeout> {
        self.0.wait_for_confirmed_flush(slot, lsn, timeout)
    }

    fn default_wait_lsn(&self, _slot: &str) -> Lsn {
        self.0.wal_end()
    }

    fn findings(&self) -> Vec<(String, Finding)> {
        self.0.findings()
    }

    fn facts(&self) -> Vec<(String, Fact)> {
        self.0.facts()
    }

    fn probe(&self) -> Option<Probe> {
        self.0.probe()
    }

    fn set_probe(&self, probe: Option<Probe>) {
        self.0.set_probe(probe);
    }

    fn set_slot_state(&self, slot: &str, state: SlotState) -> bool {
        match state {
            SlotState::Invalidated => self.0.invalidate_slot(slot),
            SlotState::Held(duration) => self.0.hold_slot(slot, duration),
            SlotState::Missing => self.0.drop_slot(slot),
        }
    }
}

fn route(server: &TestServer, request: &Request) -> Option<Answer> {
    Some(
        match (request.method.as_str(), request.segments().as_slice()) {
            ("POST", ["events"]) => events(server, &request.body),
            ("GET", ["slots"]) => Answer(
                200,
                server
                    .slots()
                    .iter()
                    .map(|s| slot(s, server.wal_end(), server.positions(&s.name)))
                    .collect(),
            ),
            ("GET", ["clients"]) => Answer(200, server.clients().iter().map(client).collect()),
            ("POST", ["checkpoint"]) => {
                server.checkpoint();
                Answer(200, json!({}))
            }
            ("POST", ["crash"]) => {
                server.crash();
                Answer(200, json!({}))
            }
            ("POST", ["shutdown"]) => {
                server.fast_shutdown();
                Answer(202, json!({}))
            }
            _ => return None,
        },
    )
}

fn events(server: &TestServer, body: &[u8]) -> Answer {
    let script = match Script::from_json_reader(BufReader::new(body)) {
        Ok(script) => script,
        Err(e) => return bad(e.to_string()),
    };
    match server.append_script(script) {
        Ok(end) => Answer(200, json!({ "wal_end": end })),
        Err(e) => bad(e.to_string()),
    }
}

fn slot(slot: &SlotInfo, wal_end: Lsn, positions: Option<Positions>) -> Value {
    let positions = positions.unwrap_or_default();
    json!({
        "name": slot.name,
        "wal_end": wal_end,
        "sent_lsn": positions.sent_lsn,
        "transaction_end_lsn": positions.transaction_end_lsn,
        "probes": positions.probes,
        "probes_answered": positions.probes_answered,
        "confirmed_flush_lsn": slot.confirmed_flush_lsn,
        "persisted_lsn": slot.persisted_lsn,
        "active": slot.active_client.is_some(),
        "active_client": slot.active_client,
        "two_phase": slot.two_phase,
        "invalidated": slot.invalidated,
    })
}

fn client(client: &ClientInfo) -> Value {
    json!({
        "id": client.id,
        "user": client.user,
        "application_name": client.application_name,
        "connected": client.connected,
        "ended": client.ended,
        "commands": client.commands,
        "stream_options": client.stream_options.iter().map(|o| json!({
            "proto_version": o.proto_version.number(),
            "publication_names": o.publication_names,
            "streaming": o.streaming.to_string(),
            "binary": o.binary,
            "messages": o.messages,
            "two_phase": o.two_phase,
        })).collect::<Vec<_>>(),
        "status_updates": client.status_updates.iter().map(|u| json!({
            "write_lsn": u.update.write_lsn,
            "flush_lsn": u.update.flush_lsn,
            "apply_lsn": u.update.apply_lsn,
            "send_time": u.update.send_time,
            "received_at": u.received_at,
            "reply_requested": u.update.reply_requested,
        })).collect::<Vec<_>>(),
        "sent": client.sent,
        "reply_delays_ms": client.replies.iter().map(Duration::as_millis).collect::<Vec<_>>(),
    })
}
