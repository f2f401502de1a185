//! Writing backend messages (server → client), as the protocol documentation lays them
//! out: a type byte, an Int32 length that counts itself, then the body.

use super::error::SqlError;
use pgoutput_codec::{encode_into, Ctx, ProtocolVersion, XLogData};

/// One backend message: `tag`, then the body `body` writes, with the length filled in.
fn message(out: &mut Vec<u8>, tag: u8, body: impl FnOnce(&mut Vec<u8>)) {
    out.push(tag);
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    body(out);
    let len = (out.len() - start) as u32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

fn cstr(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(text.as_bytes());
    out.push(0);
}

/// AuthenticationOk, AuthenticationCleartextPassword (3), AuthenticationSASLContinue
/// (11), AuthenticationSASLFinal (12): `R`, Int32 code, then data.
pub fn authentication(out: &mut Vec<u8>, code: i32, data: &[u8]) {
    message(out, b'R', |b| {
        b.extend_from_slice(&code.to_be_bytes());
        b.extend_from_slice(data);
    });
}

pub const AUTH_OK: i32 = 0;
pub const AUTH_CLEARTEXT: i32 = 3;
pub const AUTH_SASL: i32 = 10;
pub const AUTH_SASL_CONTINUE: i32 = 11;
pub const AUTH_SASL_FINAL: i32 = 12;

/// AuthenticationSASL: the mechanism names, each NUL-terminated, then an empty one.
pub fn authentication_sasl(out: &mut Vec<u8>, mechanisms: &[&str]) {
    let mut data = Vec::new();
    for mechanism in mechanisms {
        cstr(&mut data, mechanism);
    }
    data.push(0);
    authentication(out, AUTH_SASL, &data);
}

/// ParameterStatus `S`: name and value.
pub fn parameter_status(out: &mut Vec<u8>, name: &str, value: &str) {
    message(out, b'S', |b| {
        cstr(b, name);
        cstr(b, value);
    });
}

/// BackendKeyData `K`: process id and secret key (Int32 each, the protocol 3.0 form).
pub fn backend_key_data(out: &mut Vec<u8>, pid: u32, key: u32) {
    message(out, b'K', |b| {
        b.extend_from_slice(&pid.to_be_bytes());
        b.extend_from_slice(&key.to_be_bytes());
    });
}

/// ReadyForQuery `Z`: `I` idle, `T` in a transaction block, `E` in a failed one.
pub fn ready_for_query(out: &mut Vec<u8>, status: u8) {
    message(out, b'Z', |b| b.push(status));
}

/// One column of a RowDescription.
#[derive(Debug, Clone, Copy)]
pub struct Column<'a> {
    pub name: &'a str,
    pub type_oid: u32,
    pub type_len: i16,
    /// The catalog table and column number the value comes from, 0 for computed ones.
    pub table_oid: u32,
    pub attnum: i16,
}

impl<'a> Column<'a> {
    /// A computed column of a type: table and attribute 0, type modifier -1.
    pub const fn computed(name: &'a str, type_oid: u32, type_len: i16) -> Self {
        Column {
            name,
            type_oid,
            type_len,
            table_oid: 0,
            attnum: 0,
        }
    }

    /// A column read from a catalog table.
    pub const fn from_table(
        name: &'a str,
        type_oid: u32,
        type_len: i16,
        table_oid: u32,
        attnum: i16,
    ) -> Self {
        Column {
            name,
            type_oid,
            type_len,
            table_oid,
            attnum,
        }
    }
}

/// RowDescription `T`: for each column its name, table OID, attribute number, type OID,
/// type length, type modifier (-1) and format (0, text).
pub fn row_description(out: &mut Vec<u8>, columns: &[Column<'_>]) {
    message(out, b'T', |b| {
        b.extend_from_slice(&(columns.len() as i16).to_be_bytes());
        for column in columns {
            cstr(b, column.name);
            b.extend_from_slice(&column.table_oid.to_be_bytes());
            b.extend_from_slice(&column.attnum.to_be_bytes());
            b.extend_from_slice(&column.type_oid.to_be_bytes());
            b.extend_from_slice(&column.type_len.to_be_bytes());
            b.extend_from_slice(&(-1i32).to_be_bytes());
            b.extend_from_slice(&0i16.to_be_bytes());
        }
    });
}

/// DataRow `D`: each value as Int32 length and bytes, or -1 for NULL.
pub fn data_row<V: AsRef<[u8]>>(out: &mut Vec<u8>, values: &[Option<V>]) {
    message(out, b'D', |b| {
        b.extend_from_slice(&(values.len() as i16).to_be_bytes());
        for value in values {
            match value {
                Some(value) => {
                    let value = value.as_ref();
                    b.extend_from_slice(&(value.len() as i32).to_be_bytes());
                    b.extend_from_slice(value);
                }
                None => b.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
    });
}

/// CommandComplete `C`: the command tag (`SELECT 1`, `IDENTIFY_SYSTEM`, `COPY 0`).
pub fn command_complete(out: &mut Vec<u8>, tag: &str) {
    message(out, b'C', |b| cstr(b, tag));
}

/// EmptyQueryResponse `I`: the answer to an empty query string.
pub fn empty_query_response(out: &mut Vec<u8>) {
    message(out, b'I', |_| {});
}

/// ErrorResponse `E` or NoticeResponse `N`: severity (localized `S` and plain `V`), SQLSTATE
/// `C`, message `M`, and an optional detail `D` and hint `H`.
pub fn error_or_notice(
    out: &mut Vec<u8>,
    tag: u8,
    severity: &str,
    code: &str,
    text: &str,
    detail: Option<&str>,
    hint: Option<&str>,
) {
    message(out, tag, |b| {
        for (field, value) in [
            (b'S', Some(severity)),
            (b'V', Some(severity)),
            (b'C', Some(code)),
            (b'M', Some(text)),
            (b'D', detail),
            (b'H', hint),
        ] {
            if let Some(value) = value {
                b.push(field);
                cstr(b, value);
            }
        }
        b.push(0);
    });
}

/// An ErrorResponse of `severity` (`ERROR`, `FATAL`) saying `err` in PostgreSQL's words.
pub fn error_response(out: &mut Vec<u8>, severity: &str, err: &SqlError) {
    error_or_notice(
        out,
        b'E',
        severity,
        &err.code,
        &err.message,
        err.detail.as_deref(),
        err.hint.as_deref(),
    );
}

/// CopyBothResponse `W` / CopyOutResponse `H`: the overall format (0 text, 1 binary),
/// then each column's format (the same).
pub fn copy_response(out: &mut Vec<u8>, tag: u8, columns: usize, binary: bool) {
    message(out, tag, |b| {
        b.push(u8::from(binary));
        b.extend_from_slice(&(columns as i16).to_be_bytes());
        for _ in 0..columns {
            b.extend_from_slice(&i16::from(binary).to_be_bytes());
        }
    });
}

/// CopyData `d`.
pub fn copy_data(out: &mut Vec<u8>, data: &[u8]) {
    message(out, b'd', |b| b.extend_from_slice(data));
}

/// An XLogData `w` in its CopyData, laid out by the codec (its one home).
pub fn xlog_data(out: &mut Vec<u8>, xlog: &XLogData<'_>) {
    message(out, b'd', |b| {
        // Fixed fields and a payload of any length: nothing a context can refuse.
        encode_into(xlog, Ctx::plain(ProtocolVersion::V1), b).expect("an XLogData always encodes");
    });
}

/// CopyDone `c`.
pub fn copy_done(out: &mut Vec<u8>) {
    message(out, b'c', |_| {});
}

#[cfg(test)]
mod tests {
    use super::*;
    use fallible_iterator::FallibleIterator;
    use postgres_protocol::message::backend::Message;

    /// What we write, postgres-protocol's client-side parser reads back.
    #[test]
    fn messages_parse_with_postgres_protocol() {
        let mut out = Vec::new();
        row_description(&mut out, &[Column::computed("systemid", 25, -1)]);
        data_row(&mut out, &[Some("7"), None]);
        command_complete(&mut out, "IDENTIFY_SYSTEM");
        error_or_notice(&mut out, b'E', "ERROR", "42601", "syntax error", None, None);
        ready_for_query(&mut out, b'I');
        let mut buf = bytes::BytesMut::from(&out[..]);
        let Some(Message::RowDescription(body)) = Message::parse(&mut buf).unwrap() else {
            panic!("not a RowDescription")
        };
        let field = body.fields().next().unwrap().unwrap();
        assert_eq!((field.name(), field.type_oid()), ("systemid", 25));
        let Some(Message::DataRow(row)) = Message::parse(&mut buf).unwrap() else {
            panic!("not a DataRow")
        };
        let ranges: Vec<_> = row.ranges().collect().unwrap();
        assert_eq!(ranges.len(), 2);
        assert!(ranges[1].is_none());
        let Some(Message::CommandComplete(tag)) = Message::parse(&mut buf).unwrap() else {
            panic!("not a CommandComplete")
        };
        assert_eq!(tag.tag().unwrap(), "IDENTIFY_SYSTEM");
        assert!(matches!(
            Message::parse(&mut buf).unwrap(),
            Some(Message::ErrorResponse(_))
        ));
        assert!(matches!(
            Message::parse(&mut buf).unwrap(),
            Some(Message::ReadyForQuery(_))
        ));
        assert!(buf.is_empty());
    }
}
