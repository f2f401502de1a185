use pgoutput_codec::{Decode, Encode, Tagged, Xid};

#[derive(Decode, Encode, Tagged)]
#[codec(tag = b'Z', role = "begin")]
struct Start {
    #[codec(xid)]
    xid: Xid,
    #[codec(xid)]
    parent: Xid,
}

fn main() {}
