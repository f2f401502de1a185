use pgoutput_codec::{Decode, Encode, Tagged, Xid};

#[derive(Decode, Encode, Tagged)]
#[codec(tag = b'S', stream = "begin")]
struct Begin {
    xid: Xid,
}

fn main() {}
