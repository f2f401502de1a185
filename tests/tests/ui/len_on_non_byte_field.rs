use pgoutput_codec::{Decode, Encode, PgStr};

#[derive(Decode, Encode)]
#[codec(tag = b'Z')]
struct Named<'a> {
    #[codec(len = i32)]
    name: PgStr<'a>,
}

fn main() {}
