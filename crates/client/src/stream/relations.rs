//! The relation cache: what each table looks like, from the Relation messages of the
//! session, so that a change's values can be read by column name.

use std::collections::HashMap;

use pgoutput_codec::{Oid, Relation, ReplicaIdentity};

/// A table as its last Relation message described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationInfo {
    /// Its OID.
    pub oid: Oid,
    /// The schema, `pg_catalog` where the wire says nothing (lossy UTF-8).
    pub namespace: String,
    /// The table's name (lossy UTF-8).
    pub name: String,
    /// Its replica identity.
    pub replica_identity: ReplicaIdentity,
    /// The published columns, in the order of a row's values.
    pub columns: Vec<ColumnInfo>,
}

/// One column of a [`RelationInfo`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnInfo {
    /// The column's name (lossy UTF-8).
    pub name: String,
    /// The OID of its type.
    pub type_oid: Oid,
    /// Its type modifier, -1 for none.
    pub type_modifier: i32,
    /// Whether it is part of the replica identity key.
    pub key: bool,
}

impl RelationInfo {
    fn from_message(relation: &Relation<'_>) -> RelationInfo {
        RelationInfo {
            oid: relation.relation_oid,
            namespace: relation.namespace_or_pg_catalog().to_string(),
            name: relation.relation_name.to_string(),
            replica_identity: relation.replica_identity,
            columns: relation
                .columns
                .iter()
                .map(|column| ColumnInfo {
                    name: column.name.to_string(),
                    type_oid: column.type_oid,
                    type_modifier: column.type_modifier,
                    key: column.is_key(),
                })
                .collect(),
        }
    }

    /// The index of the column called `name`.
    #[must_use]
    pub fn position(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|column| column.name == name)
    }
}

/// The tables of one session, by OID. A new session (a reconnect) starts empty: the
/// server sends each Relation again before the table's first change.
#[derive(Debug, Default)]
pub(crate) struct Relations {
    by_oid: HashMap<Oid, RelationInfo>,
}

impl Relations {
    /// Remembers (or replaces) a table's description.
    pub(crate) fn learn(&mut self, relation: &Relation<'_>) {
        let info = RelationInfo::from_message(relation);
        self.by_oid.insert(info.oid, info);
    }

    pub(crate) fn get(&self, oid: Oid) -> Option<&RelationInfo> {
        self.by_oid.get(&oid)
    }

    pub(crate) fn clear(&mut self) {
        self.by_oid.clear();
    }
}
