//! SQL that PostgreSQL subscribers (15 to 18) send over a replication connection,
//! answered from the configured publications: the publication check, the table list,
//! and table sync's catalog queries and COPY. Queries are recognised by their shape and
//! their literals read from the text, so that small differences between releases do not
//! matter; anything else is refused with a clear error.

use super::catalog::{Catalog, Table};
use pgoutput_client::values::text_to_binary;
use pgoutput_codec::{Oid, ReplicaIdentity};
use pgoutput_wire::backend::Column;
use pgoutput_wire::error::{error, sqlstate, SqlError};

/// What to send for a query.
#[derive(Debug)]
pub(crate) enum Reply {
    /// A result set: columns, rows (text values, `None` for NULL) and the command tag.
    Rows {
        columns: Vec<Column<'static>>,
        rows: Vec<Vec<Option<String>>>,
        tag: String,
    },
    /// A command without rows, and whether a transaction block is now open.
    Command {
        tag: &'static str,
        in_transaction: Option<bool>,
    },
    /// `COPY … TO STDOUT`: a table's rows as CopyData payloads, in COPY's text or binary
    /// format.
    Copy {
        columns: usize,
        binary: bool,
        chunks: Vec<Vec<u8>>,
        rows: usize,
    },
    /// `set_config('search_path', '', false)`.
    SetConfig,
}

const NAME: u32 = 19;
const TEXT: u32 = 25;

/// The `'…'` literals of `sql`, in order (`''` inside is a quote).
fn literals(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            let mut value = String::new();
            loop {
                match chars.next() {
                    Some('\'') if chars.next_if_eq(&'\'').is_some() => value.push('\''),
                    Some('\'') | None => break,
                    Some(c) => value.push(c),
                }
            }
            out.push(value);
        }
    }
    out
}

/// The number after `key` in `sql` (`gpt.relid = 16385`).
fn number_after(sql: &str, key: &str) -> Option<u32> {
    let rest = &sql[sql.find(key)? + key.len()..];
    let digits: String = rest
        .trim_start()
        .trim_start_matches('=')
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The `IN ( 'a', 'b' )` publication names of `sql`.
fn publication_names(sql: &str) -> Vec<String> {
    match sql.rfind(" IN ") {
        Some(at) => literals(&sql[at..]),
        None => Vec::new(),
    }
}

/// The answer to the SQL `sql`, for a server of major version `major`.
pub(crate) fn answer(sql: &str, catalog: &Catalog, major: u32) -> Result<Reply, SqlError> {
    let normalized: String = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    let upper = normalized.to_ascii_uppercase();
    let upper = upper.trim_end_matches(';').trim();
    if upper.starts_with("SELECT PG_CATALOG.SET_CONFIG(") {
        return Ok(Reply::SetConfig);
    }
    if upper.starts_with("BEGIN") || upper.starts_with("START TRANSACTION") {
        return Ok(Reply::Command {
            tag: "BEGIN",
            in_transaction: Some(true),
        });
    }
    if upper == "COMMIT" || upper == "END" {
        return Ok(Reply::Command {
            tag: "COMMIT",
            in_transaction: Some(false),
        });
    }
    if upper == "ROLLBACK" || upper == "ABORT" {
        return Ok(Reply::Command {
            tag: "ROLLBACK",
            in_transaction: Some(false),
        });
    }
    if upper.is_empty() {
        return Ok(Reply::Command {
            tag: "",
            in_transaction: None,
        });
    }
    if upper.starts_with("COPY ") {
        return copy(&normalized, catalog);
    }
    let names = publication_names(&normalized);
    // The publications that exist (CREATE SUBSCRIPTION's check).
    if upper.starts_with("SELECT T.PUBNAME FROM PG_CATALOG.PG_PUBLICATION T") {
        let rows = names
            .iter()
            .filter(|n| catalog.publication(n).is_some())
            .map(|n| vec![Some(n.clone())])
            .collect();
        return Ok(rows_reply(
            vec![Column::from_table("pubname", NAME, 64, 6104, 2)],
            rows,
        ));
    }
    // origin = none: publications whose tables the subscriber already replicates from
    // elsewhere. This server's tables come from nowhere else.
    if upper.starts_with("SELECT DISTINCT P.PUBNAME AS PUBNAME") {
        return Ok(rows_reply(
            vec![Column::from_table("pubname", NAME, 64, 6104, 2)],
            Vec::new(),
        ));
    }
    let published = || catalog.published(&names);
    // The table list, PostgreSQL 16 and later.
    if upper.starts_with("SELECT DISTINCT N.NSPNAME, C.RELNAME, GPT.ATTRS") {
        let rows = published()
            .into_iter()
            .map(|t| {
                vec![
                    Some(t.schema.clone()),
                    Some(t.name.clone()),
                    Some(attnums(t).join(" ")),
                ]
            })
            .collect();
        return Ok(rows_reply(
            vec![
                Column::from_table("nspname", NAME, 64, 2615, 2),
                Column::from_table("relname", NAME, 64, 1259, 2),
                Column::computed("attrs", 22, -1),
            ],
            rows,
        ));
    }
    // The table list, PostgreSQL 15 (and 14, without the column names).
    if upper.starts_with("SELECT DISTINCT T.SCHEMANAME, T.TABLENAME") {
        let with_names = upper.contains("T.ATTNAMES");
        let rows = published()
            .into_iter()
            .map(|t| {
                let mut row = vec![Some(t.schema.clone()), Some(t.name.clone())];
                if with_names {
                    let names: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
                    row.push(Some(format!("{{{}}}", names.join(","))));
                }
                row
            })
            .collect();
        let mut columns = vec![
            Column::from_table("schemaname", NAME, 64, 12068, 2),
            Column::from_table("tablename", NAME, 64, 12068, 3),
        ];
        if with_names {
            columns.push(Column::from_table("attnames", 1003, -1, 12068, 4));
        }
        return Ok(rows_reply(columns, rows));
    }
    // Table sync: the relation's OID, replica identity and kind.
    if upper.starts_with("SELECT C.OID, C.RELREPLIDENT, C.RELKIND") {
        let lits = literals(&normalized);
        let (schema, name) = match lits.as_slice() {
            [schema, name, ..] => (schema.as_str(), name.as_str()),
            _ => return Err(unknown(sql)),
        };
        let rows = catalog
            .table_by_name(schema, name)
            .map(|t| {
                vec![
                    Some(t.oid.0.to_string()),
                    Some(identity_char(t.replica_identity).to_string()),
                    Some("r".to_owned()),
                ]
            })
            .into_iter()
            .collect();
        let (ident_att, kind_att) = if major >= 18 { (27, 18) } else { (26, 17) };
        return Ok(rows_reply(
            vec![
                Column::from_table("oid", 26, 4, 1259, 1),
                Column::from_table("relreplident", 18, 1, 1259, ident_att),
                Column::from_table("relkind", 18, 1, 1259, kind_att),
            ],
            rows,
        ));
    }
    // Table sync: the column list (NULL: every column is published).
    if upper.starts_with("SELECT DISTINCT (CASE WHEN (ARRAY_LENGTH(GPT.ATTRS, 1) = C.RELNATTS)") {
        let table = table_by_oid(catalog, &normalized, "WHERE gpt.relid")?;
        let rows = if published().iter().any(|t| t.oid == table.oid) {
            vec![vec![None]]
        } else {
            Vec::new()
        };
        return Ok(rows_reply(vec![Column::computed("attrs", 22, -1)], rows));
    }
    // Table sync: the columns, their types and which belong to the replica identity.
    if upper.starts_with("SELECT A.ATTNUM, A.ATTNAME, A.ATTTYPID, A.ATTNUM = ANY(I.INDKEY)") {
        let table = table_by_oid(catalog, &normalized, "a.attrelid")?;
        let generated = upper.contains("A.ATTGENERATED !=");
        let full = table.replica_identity == ReplicaIdentity::Full;
        let rows = table
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut row = vec![
                    Some((i + 1).to_string()),
                    Some(c.name.clone()),
                    Some(c.type_oid.0.to_string()),
                    Some(if c.key && !full { "t" } else { "f" }.to_owned()),
                ];
                if generated {
                    row.push(Some("f".to_owned()));
                }
                row
            })
            .collect();
        let mut columns = vec![
            Column::from_table("attnum", 21, 2, 1249, if major >= 18 { 5 } else { 6 }),
            Column::from_table("attname", NAME, 64, 1249, 2),
            Column::from_table("atttypid", 26, 4, 1249, 3),
            Column::computed("?column?", 16, 1),
        ];
        if generated {
            columns.push(Column::computed("?column?", 16, 1));
        }
        return Ok(rows_reply(columns, rows));
    }
    // Table sync: row filters (none here).
    if upper.starts_with("SELECT DISTINCT PG_GET_EXPR(GPT.QUAL, GPT.RELID)") {
        let table = table_by_oid(catalog, &normalized, "WHERE gpt.relid")?;
        let rows = if published().iter().any(|t| t.oid == table.oid) {
            vec![vec![None]]
        } else {
            Vec::new()
        };
        return Ok(rows_reply(
            vec![Column::computed("pg_get_expr", TEXT, -1)],
            rows,
        ));
    }
    Err(unknown(sql))
}

fn unknown(sql: &str) -> SqlError {
    error(
        sqlstate::FEATURE_NOT_SUPPORTED,
        format!(
            "this test server does not answer this query: {}",
            sql.trim()
        ),
    )
}

fn rows_reply(columns: Vec<Column<'static>>, rows: Vec<Vec<Option<String>>>) -> Reply {
    let tag = format!("SELECT {}", rows.len());
    Reply::Rows { columns, rows, tag }
}

fn table_by_oid<'c>(catalog: &'c Catalog, sql: &str, key: &str) -> Result<&'c Table, SqlError> {
    let oid = number_after(sql, key).ok_or_else(|| unknown(sql))?;
    catalog.table(Oid(oid)).ok_or_else(|| {
        error(
            sqlstate::UNDEFINED_TABLE,
            format!("relation with OID {oid} does not exist"),
        )
    })
}

fn attnums(table: &Table) -> Vec<String> {
    (1..=table.columns.len()).map(|n| n.to_string()).collect()
}

fn identity_char(identity: ReplicaIdentity) -> char {
    match identity {
        ReplicaIdentity::Default => 'd',
        ReplicaIdentity::Nothing => 'n',
        ReplicaIdentity::Full => 'f',
        ReplicaIdentity::Index => 'i',
    }
}

/// `COPY schema.table (columns) TO STDOUT`: the table's initial rows in COPY text form.
fn copy(sql: &str, catalog: &Catalog) -> Result<Reply, SqlError> {
    let upper = sql.to_ascii_uppercase();
    let binary = upper.contains("FORMAT BINARY");
    let target = sql[5..].trim_start();
    if target.starts_with('(') || !upper.contains(" TO STDOUT") {
        return Err(unknown(sql));
    }
    let name_end = target.find([' ', '(']).unwrap_or(target.len());
    let qualified = &target[..name_end];
    let unquote = |s: &str| s.trim_matches('"').to_owned();
    let (schema, name) = match qualified.split_once('.') {
        Some((schema, name)) => (unquote(schema), unquote(name)),
        None => ("public".to_owned(), unquote(qualified)),
    };
    let table = catalog.table_by_name(&schema, &name).ok_or_else(|| {
        error(
            sqlstate::UNDEFINED_TABLE,
            format!("relation \"{schema}.{name}\" does not exist"),
        )
    })?;
    let chunks = if binary {
        binary_copy(table)?
    } else {
        table.rows.iter().map(|row| text_copy_line(row)).collect()
    };
    Ok(Reply::Copy {
        columns: table.columns.len(),
        binary,
        chunks,
        rows: table.rows.len(),
    })
}

/// One row in COPY's text format: tab-separated, `\N` for NULL, backslash escapes.
fn text_copy_line(row: &[Option<String>]) -> Vec<u8> {
    let mut line = Vec::new();
    for (i, value) in row.iter().enumerate() {
        if i > 0 {
            line.push(b'\t');
        }
        match value {
            None => line.extend_from_slice(b"\\N"),
            Some(text) => {
                for b in text.bytes() {
                    match b {
                        b'\\' => line.extend_from_slice(b"\\\\"),
                        b'\t' => line.extend_from_slice(b"\\t"),
                        b'\n' => line.extend_from_slice(b"\\n"),
                        b'\r' => line.extend_from_slice(b"\\r"),
                        other => line.push(other),
                    }
                }
            }
        }
    }
    line.push(b'\n');
    line
}

/// COPY's binary format (what `WITH (FORMAT binary)` asks for, which PostgreSQL 16 and
/// later subscribers with `binary = true` do): the signature and header, one tuple per
/// row (Int16 field count, each field an Int32 length and its send form, -1 for NULL),
/// then the Int16 -1 trailer.
fn binary_copy(table: &Table) -> Result<Vec<Vec<u8>>, SqlError> {
    let mut header = b"PGCOPY\n\xff\r\n\0".to_vec();
    header.extend_from_slice(&0i32.to_be_bytes());
    header.extend_from_slice(&0i32.to_be_bytes());
    let mut chunks = vec![header];
    for row in &table.rows {
        let mut tuple = (row.len() as i16).to_be_bytes().to_vec();
        for (column, value) in table.columns.iter().zip(row) {
            match value {
                None => tuple.extend_from_slice(&(-1i32).to_be_bytes()),
                Some(text) => {
                    let bytes = text_to_binary(column.type_oid, text.as_bytes()).ok_or_else(|| {
                        error(
                            sqlstate::FEATURE_NOT_SUPPORTED,
                            format!(
                                "column \"{}\" of {} (type {}) has no binary form in this test server: subscribe with binary = false",
                                column.name,
                                table.qualified_name(),
                                column.type_oid.0
                            ),
                        )
                    })?;
                    tuple.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
                    tuple.extend_from_slice(&bytes);
                }
            }
        }
        chunks.push(tuple);
    }
    chunks.push((-1i16).to_be_bytes().to_vec());
    Ok(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::catalog::Publication;

    fn catalog() -> Catalog {
        Catalog::new(vec![Publication::new("p").table(
            Table::new(16385, "public", "t1")
                .key_column("id", 23)
                .column("v", 25)
                .row([Some("1"), Some("a\tb")])
                .row([Some("2"), None]),
        )])
        .unwrap()
    }

    #[test]
    fn subscriber_queries() {
        let catalog = catalog();
        let Reply::Rows { rows, .. } = answer("SELECT t.pubname FROM\n pg_catalog.pg_publication t WHERE\n t.pubname IN ('p', 'nopub')", &catalog, 18).unwrap() else { panic!() };
        assert_eq!(rows, vec![vec![Some("p".to_owned())]]);
        let Reply::Rows { rows, .. } = answer("SELECT DISTINCT n.nspname, c.relname, gpt.attrs\n       FROM pg_class c\n         JOIN pg_namespace n ON n.oid = c.relnamespace\n         JOIN ( SELECT (pg_get_publication_tables(VARIADIC array_agg(pubname::text))).*\n                FROM pg_publication\n                WHERE pubname IN ( 'p' )) AS gpt\n             ON gpt.relid = c.oid\n", &catalog, 18).unwrap() else { panic!() };
        assert_eq!(
            rows,
            vec![vec![
                Some("public".into()),
                Some("t1".into()),
                Some("1 2".into())
            ]]
        );
        let Reply::Rows { rows, .. } = answer("SELECT DISTINCT t.schemaname, t.tablename \n, t.attnames\nFROM pg_catalog.pg_publication_tables t\n WHERE t.pubname IN ( 'p' )", &catalog, 15).unwrap() else { panic!() };
        assert_eq!(rows[0][2].as_deref(), Some("{id,v}"));
        let Reply::Rows { rows, .. } = answer("SELECT c.oid, c.relreplident, c.relkind  FROM pg_catalog.pg_class c  INNER JOIN pg_catalog.pg_namespace n        ON (c.relnamespace = n.oid) WHERE n.nspname = 'public'   AND c.relname = 't1'", &catalog, 18).unwrap() else { panic!() };
        assert_eq!(
            rows[0],
            vec![Some("16385".into()), Some("d".into()), Some("r".into())]
        );
        let Reply::Rows { rows, columns, .. } = answer("SELECT a.attnum,       a.attname,       a.atttypid,       a.attnum = ANY(i.indkey), a.attgenerated != ''  FROM pg_catalog.pg_attribute a  LEFT JOIN pg_catalog.pg_index i       ON (i.indexrelid = pg_get_replica_identity_index(16385)) WHERE a.attnum > 0::pg_catalog.int2   AND NOT a.attisdropped    AND a.attrelid = 16385 ORDER BY a.attnum", &catalog, 18).unwrap() else { panic!() };
        assert_eq!(columns.len(), 5);
        assert_eq!(rows[0][3].as_deref(), Some("t"));
        let Reply::Copy { chunks, .. } =
            answer("COPY public.t1 (id, v) TO STDOUT", &catalog, 18).unwrap()
        else {
            panic!()
        };
        assert_eq!(chunks, vec![b"1\ta\\tb\n".to_vec(), b"2\t\\N\n".to_vec()]);
        let Reply::Copy {
            chunks,
            binary,
            rows,
            ..
        } = answer(
            "COPY public.t1 (id, v) TO STDOUT WITH (FORMAT binary)",
            &catalog,
            18,
        )
        .unwrap()
        else {
            panic!()
        };
        assert!(binary);
        assert_eq!(rows, 2);
        assert_eq!(chunks[0], b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0");
        assert_eq!(chunks[1], b"\0\x02\0\0\0\x04\0\0\0\x01\0\0\0\x03a\tb");
        assert_eq!(chunks[2], b"\0\x02\0\0\0\x04\0\0\0\x02\xff\xff\xff\xff");
        assert_eq!(chunks[3], b"\xff\xff");
        let Reply::Rows { rows, .. } = answer("SELECT DISTINCT pg_get_expr(gpt.qual, gpt.relid)  FROM pg_publication p,  LATERAL pg_get_publication_tables(p.pubname) gpt WHERE gpt.relid = 16385   AND p.pubname IN ( 'p' )", &catalog, 18).unwrap() else { panic!() };
        assert_eq!(rows, vec![vec![None]]);
        assert_eq!(
            answer("SELECT now()", &catalog, 18).unwrap_err().code,
            "0A000"
        );
    }
}
