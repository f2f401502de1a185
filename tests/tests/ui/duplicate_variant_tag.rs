use pgoutput_codec::{Decode, Encode};

#[derive(Decode, Encode)]
enum Identity {
    #[codec(tag = b'd')]
    Default,
    #[codec(tag = b'd')]
    Full,
}

fn main() {}
