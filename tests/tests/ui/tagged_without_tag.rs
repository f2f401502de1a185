use pgoutput_codec::{Decode, Encode, Tagged, Xid};

#[derive(Decode, Encode, Tagged)]
struct Untagged {
    xid: Xid,
}

fn main() {}
