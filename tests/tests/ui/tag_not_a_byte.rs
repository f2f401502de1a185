use pgoutput_codec::{Decode, Encode, Xid};

#[derive(Decode, Encode)]
#[codec(tag = "Z")]
struct Wide {
    xid: Xid,
}

fn main() {}
