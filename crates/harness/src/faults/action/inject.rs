//! `inject`: a pgoutput message of the rule's own, in the JSON form `pgoutput decode`
//! prints, sent at the rule's point in an XLogData at the position of the message the
//! rule fired at (for a `time` or `flush` rule, the last one sent): the poison messages of the field's reports (a Type or Origin the consumer did
//! not expect, a logical message, a Relation sent again, a stray Stream Abort under
//! protocol 1 as PostgreSQL 18 sends one). The upstream's stream and what the judge
//! follows are untouched: the message is the rule's, not the WAL's.
//!
//! It is encoded in the connection's context where that can carry it as written (an xid
//! inside a stream block, Stream Abort's parallel fields under protocol 4), else in the
//! first context that can (protocol 1 to 4, streaming off to parallel, outside then inside
//! a block): the bytes say what the JSON says, a rule being the place for what the
//! connection's options would not have produced.

use super::{Context, Effect, FaultError};
use pgoutput_codec::{
    encode, Ctx, EncodeError, PgOutputMessage, PgTimestamp, ProtocolVersion, Streaming,
};
use pgoutput_codec::{ServerMessage, XLogData};
use pgoutput_wire::backend;

/// The command line's help: the rule's JSON and what it does.
pub(super) const HELP: &str = r#"{"do": "inject", "message": {"type": "type", "xid": null, "type_oid": 16400,
    "namespace": "public", "name": "mood"}}   send a message of the rule's own (the JSON
    `pgoutput decode` prints) at the position of the one the rule fired at; not at a byte"#;

pub(super) fn check(message: &PgOutputMessage<'_>) -> Result<(), FaultError> {
    encoded(message, None).map(drop).map_err(|err| {
        FaultError(format!(
            "inject: no protocol context can carry the message: {err}"
        ))
    })
}

pub(super) fn effect(message: &PgOutputMessage<'_>, on: &Context<'_>) -> Effect {
    let Ok(payload) = encoded(message, on.ctx) else {
        // `check` refused what no context carries before the rule was armed.
        return Effect::Send(Vec::new());
    };
    let xlog = ServerMessage::XLogData(XLogData {
        wal_start: on.position,
        wal_end: on.position,
        send_time: PgTimestamp::now(),
        data: payload.into(),
    });
    let envelope = Ctx::plain(ProtocolVersion::V1);
    let mut frame = Vec::new();
    backend::copy_data(
        &mut frame,
        &encode(&xlog, envelope).expect("an XLogData always encodes"),
    );
    Effect::Send(frame)
}

/// The message's bytes in `ctx` if it carries them, else in the first context that does.
fn encoded(message: &PgOutputMessage<'_>, ctx: Option<Ctx>) -> Result<Vec<u8>, EncodeError> {
    if let Some(Ok(bytes)) = ctx.map(|ctx| encode(message, ctx)) {
        return Ok(bytes);
    }
    let mut first_error = None;
    for version in ProtocolVersion::ALL {
        for streaming in [Streaming::Off, Streaming::On, Streaming::Parallel] {
            for in_stream in [false, true] {
                let Ok(ctx) =
                    Ctx::new(version, streaming).and_then(|c| c.with_in_stream(in_stream))
                else {
                    continue;
                };
                match encode(message, ctx) {
                    Ok(bytes) => return Ok(bytes),
                    Err(err) => {
                        first_error.get_or_insert(err);
                    }
                }
            }
        }
    }
    Err(first_error.expect("protocol 1 without streaming is a context"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgoutput_codec::{decode, Lsn, Xid};

    fn message(json: &str) -> PgOutputMessage<'static> {
        serde_json::from_str(json).unwrap()
    }

    fn sent(message: &PgOutputMessage<'_>, ctx: Option<Ctx>) -> Vec<u8> {
        let on = Context {
            slot: "s",
            major: 18,
            xid: Xid(0),
            ctx,
            position: Lsn(0x1B4_D8E8),
        };
        let Effect::Send(frame) = effect(message, &on) else {
            panic!("inject sends");
        };
        // 'd', its length, then the XLogData.
        let ServerMessage::XLogData(xlog) =
            decode(&frame[5..], Ctx::plain(ProtocolVersion::V1)).unwrap()
        else {
            panic!("an XLogData");
        };
        assert_eq!((xlog.wal_start, xlog.wal_end), (on.position, on.position));
        xlog.data.to_vec()
    }

    #[test]
    fn an_injected_message_is_sent_as_written_in_the_connections_context() {
        let type_message = message(
            r#"{"type": "type", "xid": null, "type_oid": 16390, "namespace": "public", "name": "mood"}"#,
        );
        let v1 = Ctx::plain(ProtocolVersion::V1);
        assert_eq!(
            sent(&type_message, Some(v1)),
            encode(&type_message, v1).unwrap()
        );
        // Inside a stream block, with its xid.
        let streamed = message(
            r#"{"type": "type", "xid": 812, "type_oid": 16390, "namespace": "public", "name": "mood"}"#,
        );
        let block = Ctx::new(ProtocolVersion::V2, Streaming::On)
            .and_then(|c| c.with_in_stream(true))
            .unwrap();
        assert_eq!(
            sent(&streamed, Some(block)),
            encode(&streamed, block).unwrap()
        );
        // An xid the connection's context cannot carry is still sent, as the JSON says
        // (no proxy context at all: the same).
        assert_eq!(sent(&streamed, Some(v1)), encode(&streamed, block).unwrap());
        assert_eq!(sent(&streamed, None), encode(&streamed, block).unwrap());
        // A stray Stream Abort under protocol 1, as PostgreSQL 18 sends one
        // (estuary/connectors#5228): its tag, xid and subtransaction's xid.
        let abort = message(
            r#"{"type": "stream_abort", "xid": 812, "subtransaction_xid": 813,
                "abort_lsn": null, "abort_timestamp": null}"#,
        );
        let mut bytes = vec![b'A'];
        bytes.extend(812u32.to_be_bytes());
        bytes.extend(813u32.to_be_bytes());
        assert_eq!(sent(&abort, Some(v1)), bytes);
    }

    #[test]
    fn a_message_no_context_can_carry_is_refused_when_armed() {
        let nul = message(r#"{"type": "origin", "origin_lsn": "0/10", "name": "a\u0000b"}"#);
        let err = check(&nul).unwrap_err();
        assert!(err.0.contains("a NUL byte"), "{err}");
        assert!(check(&message(
            r#"{"type": "origin", "origin_lsn": "0/10", "name": "n"}"#
        ))
        .is_ok());
    }
}
