use pgoutput_codec::{Decode, Encode};

#[derive(Decode, Encode)]
#[codec(tag = b'E')]
enum Flag {
    #[codec(tag = 0)]
    Off,
    #[codec(tag = 1)]
    On,
}

fn main() {}
