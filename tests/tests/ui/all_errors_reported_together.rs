use pgoutput_codec::{Decode, Lsn, PgStr, Xid};

// Three mistakes in one derive: all three are reported in one build.
#[derive(Decode)]
#[codec(tag = b'Z')]
struct Many<'a> {
    #[since(version = 9)]
    a: Option<Xid>,
    #[since(version = 2, when = "streaming")]
    b: Option<Lsn>,
    #[codec(len = i32)]
    c: PgStr<'a>,
}

fn main() {}
