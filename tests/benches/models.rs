//! Models of the two hot loops, for the design questions BENCHMARKS.md answers with
//! instruction counts: how to hand out a decoded tuple's columns, and how to write them.
//! Each case runs one ten-column tuple (nine text values of 5 to 20 bytes and a NULL)
//! `ITERATIONS` times; `scripts/bench-callgrind models` counts the instructions per tuple
//! of each case under callgrind. Standalone code on purpose: the cases differ in the very
//! layer (reader, writer) the crate has one of.
//!
//!   models <case>    case: view | buffer | vec-writes | sized-index | sized-shrinking |
//!                    sized-inline-copy | none

use std::hint::black_box;

/// How many times each case runs its tuple.
const ITERATIONS: usize = 100_000;

/// A column value as the crate's `ColumnValue` has it.
#[derive(Clone, Copy)]
enum Column<'a> {
    Null,
    Unchanged,
    Text(&'a [u8]),
    Binary(&'a [u8]),
}

/// An owned column value, as an encoder is given it.
enum OwnedColumn {
    Null,
    Text(Vec<u8>),
}

/// One column read from `rest` without building errors, the crate's fast path: the tag
/// and the Int32 length of a `'t'` or `'b'` under one bounds check.
#[inline(always)]
fn read_column<'a>(rest: &mut &'a [u8]) -> Option<Column<'a>> {
    let bytes = *rest;
    if let Some((header, tail)) = bytes.split_first_chunk::<5>() {
        let [tag, length @ ..] = *header;
        if tag == b't' || tag == b'b' {
            let (value, tail) = tail.split_at_checked(i32::from_be_bytes(length) as usize)?;
            *rest = tail;
            return Some(if tag == b't' {
                Column::Text(value)
            } else {
                Column::Binary(value)
            });
        }
    }
    let (&tag, tail) = bytes.split_first()?;
    *rest = tail;
    match tag {
        b'n' => Some(Column::Null),
        b'u' => Some(Column::Unchanged),
        _ => None,
    }
}

fn value_len(column: &Column<'_>) -> usize {
    match column {
        Column::Text(value) | Column::Binary(value) => value.len(),
        Column::Null | Column::Unchanged => 0,
    }
}

/// Decoding as the crate does: validate every column, then read them again when the
/// caller iterates.
#[inline(never)]
fn view(bytes: &[u8], columns: usize) -> Option<usize> {
    let mut rest = bytes;
    for _ in 0..columns {
        read_column(&mut rest)?;
    }
    let mut rest = bytes;
    let mut total = 0;
    for _ in 0..columns {
        total += value_len(&read_column(&mut rest)?);
    }
    Some(total)
}

/// The alternative: one pass into a buffer the caller reuses, then iterate the buffer.
#[inline(never)]
fn buffer<'a>(bytes: &'a [u8], columns: usize, buf: &mut Vec<Column<'a>>) -> Option<usize> {
    buf.clear();
    let mut rest = bytes;
    for _ in 0..columns {
        buf.push(read_column(&mut rest)?);
    }
    Some(black_box(&*buf).iter().map(value_len).sum())
}

/// The column's tag and Int32 length, or `None` for a value too long for it.
fn header(value: &[u8]) -> Option<[u8; 5]> {
    let [a, b, c, d] = i32::try_from(value.len()).ok()?.to_be_bytes();
    Some([b't', a, b, c, d])
}

/// Encoding as the crate does: each write appends to the growable buffer.
#[inline(never)]
fn vec_writes(columns: &[OwnedColumn], buf: &mut Vec<u8>) -> Option<()> {
    buf.extend_from_slice(&u16::try_from(columns.len()).ok()?.to_be_bytes());
    for column in columns {
        match column {
            OwnedColumn::Null => buf.push(b'n'),
            OwnedColumn::Text(value) => {
                buf.extend_from_slice(&header(value)?);
                buf.extend_from_slice(value);
            }
        }
    }
    Some(())
}

/// The tuple's encoded length, checking each value fits its Int32 length.
fn sized(columns: &[OwnedColumn]) -> Option<usize> {
    columns
        .iter()
        .try_fold(2, |total: usize, column| match column {
            OwnedColumn::Null => Some(total + 1),
            OwnedColumn::Text(value) => {
                i32::try_from(value.len()).ok()?;
                Some(total + 5 + value.len())
            }
        })
}

/// How the pre-sized cases copy a value into their slice.
#[derive(Clone, Copy)]
enum ValueCopy {
    Memcpy,
    /// Values of 4 to 16 bytes as two overlapping fixed-size copies, no `memcpy` call.
    Inline,
}

fn copy_value(dst: &mut [u8], value: &[u8], copy: ValueCopy) {
    let n = value.len();
    match copy {
        ValueCopy::Inline if (8..=16).contains(&n) => {
            dst[..8].copy_from_slice(&value[..8]);
            dst[n - 8..].copy_from_slice(&value[n - 8..]);
        }
        ValueCopy::Inline if (4..8).contains(&n) => {
            dst[..4].copy_from_slice(&value[..4]);
            dst[n - 4..].copy_from_slice(&value[n - 4..]);
        }
        _ => dst.copy_from_slice(value),
    }
}

/// Encoding into the exact size, reserved and zero-filled first, with a cursor index.
#[inline(never)]
fn sized_index(columns: &[OwnedColumn], buf: &mut Vec<u8>, copy: ValueCopy) -> Option<()> {
    let start = buf.len();
    buf.resize(start + sized(columns)?, 0);
    let out = &mut buf[start..];
    out.get_mut(..2)?
        .copy_from_slice(&u16::try_from(columns.len()).ok()?.to_be_bytes());
    let mut at = 2;
    for column in columns {
        match column {
            OwnedColumn::Null => {
                *out.get_mut(at)? = b'n';
                at += 1;
            }
            OwnedColumn::Text(value) => {
                out.get_mut(at..at + 5)?.copy_from_slice(&header(value)?);
                at += 5;
                copy_value(out.get_mut(at..at + value.len())?, value, copy);
                at += value.len();
            }
        }
    }
    Some(())
}

/// Encoding into the exact size through a slice that shrinks as it is written (as
/// `io::Write` for `&mut [u8]` does).
#[inline(never)]
fn sized_shrinking(columns: &[OwnedColumn], buf: &mut Vec<u8>) -> Option<()> {
    let start = buf.len();
    buf.resize(start + sized(columns)?, 0);
    let mut out = &mut buf[start..];
    let mut put = |bytes: &[u8]| -> Option<()> {
        let (dst, rest) = core::mem::take(&mut out).split_at_mut_checked(bytes.len())?;
        dst.copy_from_slice(bytes);
        out = rest;
        Some(())
    };
    put(&u16::try_from(columns.len()).ok()?.to_be_bytes())?;
    for column in columns {
        match column {
            OwnedColumn::Null => put(b"n")?,
            OwnedColumn::Text(value) => {
                put(&header(value)?)?;
                put(value)?;
            }
        }
    }
    Some(())
}

/// Runs `case` once: the values' bytes read, or the bytes written; `None` if it failed.
fn run<'a>(
    case: &str,
    columns: &'a [u8],
    owned: &[OwnedColumn],
    out: &mut Vec<u8>,
    spans: &mut Vec<Column<'a>>,
) -> Option<usize> {
    out.clear();
    let owned = black_box(owned);
    let written = match case {
        "view" => return view(black_box(columns), 10),
        "buffer" => return buffer(black_box(columns), 10, spans),
        "none" => return Some(0),
        "vec-writes" => vec_writes(owned, out),
        "sized-index" => sized_index(owned, out, ValueCopy::Memcpy),
        "sized-inline-copy" => sized_index(owned, out, ValueCopy::Inline),
        "sized-shrinking" => sized_shrinking(owned, out),
        other => panic!("unknown case {other}"),
    };
    written.map(|()| out.len())
}

fn main() {
    let case = std::env::args().nth(1).unwrap_or_else(|| "none".into());
    let owned: Vec<OwnedColumn> = (0..10)
        .map(|i| match i {
            3 => OwnedColumn::Null,
            _ => OwnedColumn::Text(vec![b'x'; 5 + (i * 3) % 17]),
        })
        .collect();
    let mut wire = Vec::new();
    vec_writes(&owned, &mut wire).expect("the model tuple encodes");
    let columns = &wire[2..];
    let (mut out, mut spans) = (Vec::with_capacity(4096), Vec::with_capacity(64));

    // Every case does the whole job: checked once, outside the counted loop.
    let done = run(&case, columns, &owned, &mut out, &mut spans);
    let done = done.unwrap_or_else(|| panic!("{case} failed"));
    if matches!(case.as_str(), "view" | "buffer") {
        let value_bytes: usize = owned
            .iter()
            .map(|column| match column {
                OwnedColumn::Text(value) => value.len(),
                OwnedColumn::Null => 0,
            })
            .sum();
        assert_eq!(done, value_bytes, "{case} read other values");
    } else if case != "none" {
        assert_eq!(out, wire, "{case} wrote other bytes");
    }
    for _ in 1..ITERATIONS {
        black_box(run(&case, columns, &owned, &mut out, &mut spans));
    }
    println!("{case}: {ITERATIONS} tuples");
}
