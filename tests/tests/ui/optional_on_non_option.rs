use pgoutput_codec::{Decode, Encode, OldTuple};

#[derive(Decode, Encode)]
#[codec(tag = b'Z')]
struct Maybe<'a> {
    #[codec(optional)]
    old: OldTuple<'a>,
}

fn main() {}
