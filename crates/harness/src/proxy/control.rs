//! The proxy's control API (`pgoutput proxy --control`): the fault rules of `pgoutput
//! serve` (the same JSON), what the proxy knows of its connections and their upstreams,
//! the slots streamed through it, and a wait for a slot to be confirmed.
//!
//! | request | body | answer |
//! |---|---|---|
//! | `GET /` | | the endpoints |
//! | `GET /faults` | | `[{"rule": {…}, "fired": 0}]` |
//! | `POST /faults` | a rule, or an array of rules | `{"armed": 1}` |
//! | `DELETE /faults` | | `{}` |
//! | `GET /connections` | | `[{"id", "peer", "user", "upstream", "slot", "frames", "status_updates", "flush_lsn", "ended", …}]` |
//! | `GET /slots` | | `[{"name", "confirmed_flush_lsn", "sent_lsn", "active_connection"}]` |
//! | `GET /findings`, `GET /facts` | | `[{"finding": "confirmed_unsent", "slot", "connection", "flush", "sent", "text"}, …]` |
//! | `GET /probe`, `POST /probe`, `DELETE /probe` | `{"every": 1}` | the judge's probe |
//! | `POST /wait` | `{"slot": "s", "lsn": "0/1000360", "timeout_ms": 5000}` | `{"confirmed_flush_lsn"}`, or 408 |
//! | `GET /log` | | `["connection 1: streaming from slot s …", …]` |
//! | `POST /checkpoint`, `POST /crash` | | `{}` |
//! | `POST /slots/NAME/invalidate` | | `{}`: START_REPLICATION of it gets 55000 |
//! | `POST /slots/NAME/hold` | `{"ms": 2000}` | `{}`: 55006 that long after its client leaves |
//! | `DELETE /slots/NAME` | | `{}`: START_REPLICATION of it gets 42704 (the real slot stays) |

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::Shared;
use crate::confirmed::Timeout;
use crate::control::{Answer, Api, Control, Request, SlotState};
use crate::faults::Fault;
use crate::judge::{Fact, Finding, Probe};
use pgoutput_codec::Lsn;

/// Serves the proxy's API.
pub(super) fn start(shared: Arc<Shared>, addr: SocketAddr, remote: bool) -> io::Result<Control> {
    Control::serve(Arc::new(ProxyApi(shared)), addr, remote)
}

struct ProxyApi(Arc<Shared>);

impl Api for ProxyApi {
    fn endpoints(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("GET /connections", "each client connection: who, its upstream, its slot, frames, status updates, how it ended"),
            ("GET /slots", "each slot streamed through the proxy: confirmed, heard and sent positions, the connection streaming it, what a crash re-sent"),
            ("GET /log", "what the proxy noted: streams, rules that fired, frames it could not decode"),
            ("POST /checkpoint", "let the upstream hear each slot's confirmed position now (with a checkpoint interval)"),
            ("POST /crash", "cut every connection; new ones get 57P03 for the crash refusal time"),
        ]
    }

    fn route(&self, request: &Request) -> Option<Answer> {
        let shared = &self.0;
        Some(
            match (request.method.as_str(), request.segments().as_slice()) {
                ("GET", ["connections"]) => Answer(200, json!(shared.records.connections())),
                ("GET", ["slots"]) => Answer(200, json!(shared.slot_infos())),
                ("POST", ["checkpoint"]) => {
                    shared.checkpoint();
                    Answer(200, json!({}))
                }
                ("POST", ["crash"]) => {
                    shared.crash();
                    Answer(200, json!({}))
                }
                ("GET", ["log"]) => Answer(
                    200,
                    Value::Array(
                        shared
                            .log
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .iter()
                            .map(|line| Value::from(line.as_str()))
                            .collect(),
                    ),
                ),
                _ => return None,
            },
        )
    }

    fn faults(&self) -> Vec<(Fault, u64)> {
        self.0.faults.faults()
    }

    fn add_fault(&self, fault: Fault) {
        self.0.faults.add(fault);
    }

    fn clear_faults(&self) {
        self.0.faults.clear();
    }

    fn wait_for_confirmed_flush(
        &self,
        slot: &str,
        lsn: Lsn,
        timeout: Duration,
    ) -> Result<Lsn, Timeout> {
        self.0.slots.wait_for_confirmed_flush(slot, lsn, timeout)
    }

    fn default_wait_lsn(&self, slot: &str) -> Lsn {
        self.0.slots.sent_lsn(slot)
    }

    fn findings(&self) -> Vec<(String, Finding)> {
        self.0.slots.findings()
    }

    fn facts(&self) -> Vec<(String, Fact)> {
        self.0.slots.facts()
    }

    fn probe(&self) -> Option<Probe> {
        self.0.probe.get()
    }

    fn set_probe(&self, probe: Option<Probe>) {
        self.0.log(format!("probe: {probe:?}"));
        self.0.probe.set(probe);
    }

    fn set_slot_state(&self, slot: &str, state: SlotState) -> bool {
        // The proxy keeps a state for any name: the upstream's slots are not its to know.
        match state {
            SlotState::Invalidated => self.0.slots.invalidate(slot),
            SlotState::Held(duration) => self.0.slots.hold(slot, duration),
            SlotState::Missing => self.0.slots.forget(slot),
        }
        true
    }
}
