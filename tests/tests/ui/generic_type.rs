use pgoutput_codec::{Decode, Encode};

#[derive(Decode, Encode)]
#[codec(tag = b'G')]
struct Wrapper<'a, 'b, T> {
    value: T,
    first: &'a (),
    second: &'b (),
}

fn main() {}
