//! Messages a consumer does not expect, for the `inject` action's tests on the test
//! server and through the proxy: the poison messages of the field's reports.

use pgoutput_codec::{Lsn, Message, MessageFlags, Oid, PgOutputMessage, Type};

/// A non-transactional logical message, sent though the consumer did not ask for
/// messages.
pub fn message() -> PgOutputMessage<'static> {
    PgOutputMessage::Message(Message {
        xid: None,
        flags: MessageFlags::NonTransactional,
        lsn: Lsn(0x0123_4567),
        prefix: "poison".into(),
        content: b"{\"not\": \"expected\"}".to_vec().into(),
    })
}

/// A Type message for an enum the consumer never heard of (outboxx#89 crashed on `Y`).
pub fn enum_type() -> PgOutputMessage<'static> {
    PgOutputMessage::Type(Type {
        xid: None,
        type_oid: Oid(16_400),
        namespace: "public".into(),
        name: "mood".into(),
    })
}
