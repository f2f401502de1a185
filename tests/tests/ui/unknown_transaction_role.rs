use pgoutput_codec::{Decode, Encode, Tagged, Xid};

#[derive(Decode, Encode, Tagged)]
#[codec(tag = b'Z', role = "commit")]
struct Finish {
    xid: Xid,
}

fn main() {}
