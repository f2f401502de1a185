//! What the server says its database holds: publications and their tables. Subscribers
//! read it through catalog queries; the stream's Relation messages are made from it.

use pgoutput_codec::{ColumnValue, Oid, PgStr, Relation, RelationColumn, ReplicaIdentity, Xid};

/// A column of a published table. In JSON (`pgoutput serve --config`): `name`,
/// `type_oid`, and optionally `type_modifier` (default -1) and `key` (default false).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Column {
    /// The column name.
    pub name: String,
    /// The type's OID (`23` int4, `25` text, …): it decides how values convert between
    /// the text and binary forms, and what a subscriber's table sync expects.
    pub type_oid: Oid,
    /// The type modifier (`-1` for none; `varchar(10)` is 14).
    #[serde(default = "no_type_modifier")]
    pub type_modifier: i32,
    /// Part of the replica identity (the primary key, for `default` identity).
    #[serde(default)]
    pub key: bool,
}

/// A published table: its identity, its columns, and the rows it holds when a
/// subscriber's table sync copies it (`copy_data = true`). In JSON: `oid`, `name`,
/// `columns`, and optionally `schema` (default `public`), `replica_identity` (`default`,
/// `nothing`, `full`, `index`; default `default`) and `rows`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Table {
    /// The relation's OID, which the stream's changes refer to.
    pub oid: Oid,
    /// The schema (`public`).
    #[serde(default = "public")]
    pub schema: String,
    /// The table name.
    pub name: String,
    /// `REPLICA IDENTITY`: which old values updates and deletes carry.
    #[serde(default = "default_identity")]
    pub replica_identity: ReplicaIdentity,
    /// The columns, in order.
    pub columns: Vec<Column>,
    /// Initial rows, in text form (`None` is NULL), served to `COPY … TO STDOUT`.
    #[serde(default)]
    pub rows: Vec<Vec<Option<String>>>,
    /// The Type messages pgoutput sends before the table's Relation, one for each column
    /// of a type outside `pg_catalog`'s built-in ones (a captured table keeps those it
    /// came with).
    #[serde(skip)]
    pub types: Vec<pgoutput_codec::Type<'static>>,
    /// Column types that are enums: a label is both the text and the binary form, so
    /// values convert between the forms as they are. A capture's Type lines say so with
    /// `"enum": true` (`pgoutput tail --wal-positions` writes it).
    #[serde(default)]
    pub enums: Vec<Oid>,
}

fn no_type_modifier() -> i32 {
    -1
}

fn public() -> String {
    "public".into()
}

fn default_identity() -> ReplicaIdentity {
    ReplicaIdentity::Default
}

impl Table {
    /// A table `schema.name` with relation OID `oid`, replica identity `default` and no
    /// columns yet.
    #[must_use]
    pub fn new(oid: u32, schema: &str, name: &str) -> Table {
        Table {
            oid: Oid(oid),
            schema: schema.to_owned(),
            name: name.to_owned(),
            replica_identity: ReplicaIdentity::Default,
            columns: Vec::new(),
            rows: Vec::new(),
            types: Vec::new(),
            enums: Vec::new(),
        }
    }

    /// Adds a column of type `type_oid`.
    #[must_use]
    pub fn column(mut self, name: &str, type_oid: u32) -> Table {
        self.columns.push(Column {
            name: name.to_owned(),
            type_oid: Oid(type_oid),
            type_modifier: -1,
            key: false,
        });
        self
    }

    /// Adds a column that is part of the replica identity (the primary key).
    #[must_use]
    pub fn key_column(mut self, name: &str, type_oid: u32) -> Table {
        self = self.column(name, type_oid);
        self.columns.last_mut().expect("just pushed").key = true;
        self
    }

    /// Sets the replica identity (`Full` makes updates and deletes carry the whole old
    /// row).
    #[must_use]
    pub fn replica_identity(mut self, identity: ReplicaIdentity) -> Table {
        self.replica_identity = identity;
        self
    }

    /// Adds an initial row (text values; `None` is NULL) for table sync to copy.
    #[must_use]
    pub fn row<I, V>(mut self, values: I) -> Table
    where
        I: IntoIterator<Item = Option<V>>,
        V: Into<String>,
    {
        self.rows
            .push(values.into_iter().map(|v| v.map(Into::into)).collect());
        self
    }

    /// `schema.name`.
    #[must_use]
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }

    /// The Relation message pgoutput sends for this table (with `xid` inside a stream
    /// block). Under `REPLICA IDENTITY FULL` every column is flagged as part of the key.
    #[must_use]
    pub fn relation(&self, xid: Option<Xid>) -> Relation<'static> {
        let full = self.replica_identity == ReplicaIdentity::Full;
        Relation {
            xid,
            relation_oid: self.oid,
            namespace: PgStr::from(self.schema.clone()),
            relation_name: PgStr::from(self.name.clone()),
            replica_identity: self.replica_identity,
            columns: self
                .columns
                .iter()
                .map(|c| RelationColumn {
                    flags: u8::from(c.key || full),
                    name: PgStr::from(c.name.clone()),
                    type_oid: c.type_oid,
                    type_modifier: c.type_modifier,
                })
                .collect(),
        }
    }

    /// A table from a Relation message (a script captured with `pgoutput tail` carries
    /// them).
    #[must_use]
    pub fn from_relation(relation: &Relation<'_>) -> Table {
        Table {
            oid: relation.relation_oid,
            schema: relation
                .namespace_or_pg_catalog()
                .to_string_lossy()
                .into_owned(),
            name: relation.relation_name.to_string_lossy().into_owned(),
            replica_identity: relation.replica_identity,
            columns: relation
                .columns
                .iter()
                .map(|c| Column {
                    name: c.name.to_string_lossy().into_owned(),
                    type_oid: c.type_oid,
                    type_modifier: c.type_modifier,
                    key: c.is_key(),
                })
                .collect(),
            rows: Vec::new(),
            types: Vec::new(),
            enums: Vec::new(),
        }
    }

    /// How a column's values convert between text and binary: an enum's label is both
    /// forms; a domain converts as the built-in type it is over (its Type message names
    /// it); any other column as its own type.
    pub(crate) fn value_form(&self, column: &Column) -> ValueForm {
        if self.enums.contains(&column.type_oid) {
            return ValueForm::Label;
        }
        let domain_base = self
            .types
            .iter()
            .find(|t| t.type_oid == column.type_oid && t.namespace.as_bytes().is_empty())
            .and_then(|t| pgoutput_client::values::builtin_type(&t.name.to_string_lossy()));
        ValueForm::Type(domain_base.unwrap_or(column.type_oid))
    }

    /// The old values an update or delete carries for `old_row` under this table's
    /// replica identity: the whole row (`O`) for `FULL`, else the key (`K`) with the other
    /// columns NULL.
    pub(crate) fn old_tuple(
        &self,
        old_row: Vec<ColumnValue<'static>>,
    ) -> pgoutput_codec::OldTuple<'static> {
        if self.replica_identity == ReplicaIdentity::Full {
            return pgoutput_codec::OldTuple::Old(pgoutput_codec::TupleData::new(old_row));
        }
        let key = old_row
            .into_iter()
            .enumerate()
            .map(|(i, value)| match self.columns.get(i) {
                Some(column) if column.key => value,
                _ => ColumnValue::Null,
            })
            .collect();
        pgoutput_codec::OldTuple::Key(pgoutput_codec::TupleData::new(key))
    }
}

/// How a column's values convert between text and binary ([`Table::value_form`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueForm {
    /// An enum: the label is the text and the binary form alike.
    Label,
    /// As values of this built-in type.
    Type(Oid),
}

/// A publication: a name and the tables it publishes. In JSON: `name`, and optionally
/// `tables` and `all_tables`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Publication {
    /// The publication name, as `CREATE PUBLICATION` would store it (already folded to
    /// lower case if it was not quoted).
    pub name: String,
    /// The tables, by relation OID; the tables themselves are the server's.
    #[serde(default)]
    pub tables: Vec<Table>,
    /// `FOR ALL TABLES`: every table the server knows, including those only the script's
    /// Relation messages define.
    #[serde(default)]
    pub all_tables: bool,
}

impl Publication {
    /// A publication of the given tables (add them with [`table`](Self::table)).
    #[must_use]
    pub fn new(name: &str) -> Publication {
        Publication {
            name: name.to_owned(),
            tables: Vec::new(),
            all_tables: false,
        }
    }

    /// A `FOR ALL TABLES` publication.
    #[must_use]
    pub fn all_tables(name: &str) -> Publication {
        Publication {
            all_tables: true,
            ..Publication::new(name)
        }
    }

    /// Publishes `table`.
    #[must_use]
    pub fn table(mut self, table: Table) -> Publication {
        self.tables.push(table);
        self
    }
}

/// Every table the server knows, and which publication has which.
#[derive(Debug, Clone, Default)]
pub(crate) struct Catalog {
    pub publications: Vec<Publication>,
    /// Tables by OID, in the order first seen.
    pub tables: Vec<Table>,
}

impl Catalog {
    /// The catalog of `publications`' tables.
    ///
    /// # Errors
    ///
    /// Naming the publication and table (as `--config` keys): one OID given to two
    /// different tables, or an initial row that is not as wide as its table.
    pub(crate) fn new(publications: Vec<Publication>) -> Result<Catalog, String> {
        let mut catalog = Catalog {
            publications,
            tables: Vec::new(),
        };
        let mut tables = Vec::new();
        for (p, publication) in catalog.publications.iter().enumerate() {
            for (t, table) in publication.tables.iter().enumerate() {
                let key = format!("publications[{p}].tables[{t}]");
                for (r, row) in table.rows.iter().enumerate() {
                    if row.len() != table.columns.len() {
                        return Err(format!(
                            "{key}.rows[{r}]: {} values, but table {} has {} columns",
                            row.len(),
                            table.qualified_name(),
                            table.columns.len()
                        ));
                    }
                }
                match tables
                    .iter()
                    .find(|(_, known): &&(String, Table)| known.oid == table.oid)
                {
                    Some((_, known)) if known == table => {}
                    Some((first, known)) => {
                        return Err(format!(
                            "{key}: table {} has OID {}, which {first} gives to {}",
                            table.qualified_name(),
                            table.oid.0,
                            known.qualified_name()
                        ))
                    }
                    None => tables.push((key, table.clone())),
                }
            }
        }
        for (_, table) in tables {
            catalog.add_table(table);
        }
        Ok(catalog)
    }

    /// Registers a table (the first definition of an OID wins).
    pub(crate) fn add_table(&mut self, table: Table) {
        if self.table(table.oid).is_none() {
            self.tables.push(table);
        }
    }

    pub(crate) fn table(&self, oid: Oid) -> Option<&Table> {
        self.tables.iter().find(|t| t.oid == oid)
    }

    pub(crate) fn table_by_name(&self, schema: &str, name: &str) -> Option<&Table> {
        self.tables
            .iter()
            .find(|t| t.schema == schema && t.name == name)
    }

    pub(crate) fn publication(&self, name: &str) -> Option<&Publication> {
        self.publications.iter().find(|p| p.name == name)
    }

    /// The tables the named publications publish, each once, in catalog order.
    pub(crate) fn published(&self, names: &[String]) -> Vec<&Table> {
        let publications: Vec<&Publication> =
            names.iter().filter_map(|n| self.publication(n)).collect();
        self.tables
            .iter()
            .filter(|t| {
                publications
                    .iter()
                    .any(|p| p.all_tables || p.tables.iter().any(|pt| pt.oid == t.oid))
            })
            .collect()
    }
}
