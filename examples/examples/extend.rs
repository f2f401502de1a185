//! Sends pgoutput messages and a made-up Heartbeat message through one session, and reads
//! them back with one decoder.
//!
//! Run it with `cargo run -p pgoutput-examples --example extend`.

use pgoutput_codec::{
    Decoder, Encoder, PgOutputMessage, ProtocolVersion, StreamStart, StreamStop, Streaming, Xid,
};
use pgoutput_examples::extension::{ExtendedMessage, Heartbeat};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut encoder = Encoder::new(ProtocolVersion::V2, Streaming::On)?;
    let mut decoder = Decoder::new(ProtocolVersion::V2, Streaming::On)?;
    let beat = |xid: Option<u32>| {
        ExtendedMessage::Heartbeat(Heartbeat {
            xid: xid.map(Xid),
            lsn: "0/16B3748".parse().expect("valid LSN"),
            note: "alive".into(),
        })
    };
    let script = [
        beat(None),
        ExtendedMessage::PgOutput(PgOutputMessage::StreamStart(StreamStart {
            xid: Xid(744),
            first_segment: true,
        })),
        beat(Some(744)),
        ExtendedMessage::PgOutput(PgOutputMessage::StreamStop(StreamStop)),
    ];
    for message in &script {
        let bytes = encoder.encode(message)?;
        let decoded: ExtendedMessage<'_> = decoder.decode_as(&bytes)?;
        assert_eq!(&decoded, message);
        let hex = hex::encode(&bytes);
        println!("{hex:<40} {decoded:?}");
    }
    Ok(())
}
