use pgoutput_codec::{Decode, Encode};

#[derive(Decode, Encode)]
union Bits {
    a: u32,
    b: f32,
}

fn main() {}
