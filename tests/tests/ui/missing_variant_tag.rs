use pgoutput_codec::{Decode, Encode, PgBytes};

#[derive(Decode, Encode)]
enum Column<'a> {
    #[codec(tag = b'n')]
    Null,
    Unchanged,
    #[codec(tag = b't')]
    Text(#[codec(len = i32)] PgBytes<'a>),
}

fn main() {}
