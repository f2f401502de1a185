//! Builds a Message and a Stream Abort, prints their bytes in each context where the layout
//! differs, and decodes them back.
//!
//! Run it with `cargo run -p pgoutput-examples --example quickstart`.

use pgoutput_codec::{
    decode, encode, Ctx, Lsn, Message, MessageFlags, PgOutputMessage, PgTimestamp, ProtocolVersion,
    StreamAbort, Streaming, Xid,
};

/// Encodes `message` in `ctx`, prints it, and checks it decodes back to the same value.
fn show(
    label: &str,
    message: &PgOutputMessage<'_>,
    ctx: Ctx,
) -> Result<(), Box<dyn std::error::Error>> {
    let bytes = encode(message, ctx)?;
    let decoded: PgOutputMessage<'_> = decode(&bytes, ctx)?;
    assert_eq!(&decoded, message);
    println!(
        "{label}\n  context: {ctx}\n  bytes:   {}\n  decoded: {decoded:?}\n",
        hex::encode(&bytes)
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let v1 = Ctx::plain(ProtocolVersion::V1);
    let streaming = Ctx::new(ProtocolVersion::V4, Streaming::On)?;
    let parallel = Ctx::new(ProtocolVersion::V4, Streaming::Parallel)?;

    let mut message = Message {
        xid: None,
        flags: MessageFlags::Transactional,
        lsn: "0/16B3748".parse::<Lsn>()?,
        prefix: "audit".into(),
        content: b"user 42 logged in".into(),
    };
    show(
        "Message, outside a stream block",
        &PgOutputMessage::Message(message.clone()),
        v1,
    )?;

    // Inside a Stream Start/Stop block the Message carries the streamed transaction's xid.
    message.xid = Some(Xid(744));
    show(
        "Message, inside a stream block",
        &PgOutputMessage::Message(message.clone()),
        streaming.with_in_stream(true)?,
    )?;

    // The same value cannot be written outside a block: that would drop the xid.
    let err = encode(&message, streaming).unwrap_err();
    println!("Encoding it outside a block is refused:\n  {err}\n");

    let abort = StreamAbort {
        xid: Xid(744),
        subtransaction_xid: Xid(745),
        abort_lsn: None,
        abort_timestamp: None,
    };
    show(
        "Stream Abort, streaming on",
        &PgOutputMessage::StreamAbort(abort),
        streaming,
    )?;

    let abort = StreamAbort {
        abort_lsn: Some("0/14FFE70".parse()?),
        abort_timestamp: Some(PgTimestamp::from_unix_micros(1_795_951_319_369_492).ok_or("range")?),
        ..abort
    };
    show(
        "Stream Abort, streaming parallel",
        &PgOutputMessage::StreamAbort(abort),
        parallel,
    )?;

    // Bad input is a positioned, typed error, never a panic.
    let err = decode::<PgOutputMessage<'_>>(b"A\x00\x00\x02\xe8\x00\x00", streaming).unwrap_err();
    println!("Decoding a truncated Stream Abort:\n  {err}");
    Ok(())
}
