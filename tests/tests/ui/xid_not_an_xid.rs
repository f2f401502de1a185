use pgoutput_codec::{Decode, Encode, Tagged};

#[derive(Decode, Encode, Tagged)]
#[codec(tag = b'Z', role = "begin")]
struct Start {
    #[codec(xid)]
    xid: u64,
}

fn main() {}
