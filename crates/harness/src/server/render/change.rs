//! Changes and their values: which a client sees (its publications, its options), and
//! each value in the text or binary form the client asked for.

use std::borrow::Cow;

use crate::server::catalog::{Column, Table, ValueForm};
use crate::server::script::relations_of;
use pgoutput_client::values::{binary_to_text, text_to_binary};
use pgoutput_codec::{ColumnValue, Lsn, Oid, OldTuple, PgOutputMessage, PgStr, TupleData, Xid};

use super::{Halt, RenderError, Renderer, Sink};

/// Whether pgoutput's change callbacks see it (where it loads the publications).
pub(super) fn is_table_change(message: &PgOutputMessage<'_>) -> bool {
    matches!(
        message,
        PgOutputMessage::Insert(_)
            | PgOutputMessage::Update(_)
            | PgOutputMessage::Delete(_)
            | PgOutputMessage::Truncate(_)
    )
}

impl Renderer<'_> {
    /// A visible change, after the Relation messages of the tables it touches when this
    /// client needs them (pgoutput's rules: [`SchemaCache`]), with the xid `xid` set in a
    /// block of the streamed transaction `stream`, and its values in the client's form.
    /// The message is a view of the script's (its values borrowed), so a change costs one
    /// small allocation, not a copy of the row.
    pub(super) fn change<S>(
        &mut self,
        sink: &mut dyn Sink<Stop = S>,
        lsn: Lsn,
        message: &PgOutputMessage<'_>,
        xid: Option<Xid>,
        stream: Option<Xid>,
    ) -> Result<(), Halt<S>> {
        if is_table_change(message) {
            self.load_publications(sink)?;
        }
        if let PgOutputMessage::Relation(relation) = message {
            // A script's own Relation change: the schema goes out here.
            self.schemas.sent(relation.relation_oid, stream);
        }
        for oid in relations_of(message) {
            if self.published.contains(&oid) && self.schemas.needs(oid, stream) {
                self.schemas.sent(oid, stream);
                self.send_schema(sink, oid, xid)?;
            }
        }
        if self.sent_as_scripted(message, xid) {
            return self.emit(sink, lsn, message);
        }
        let change = match message {
            PgOutputMessage::Insert(m) => PgOutputMessage::Insert(pgoutput_codec::Insert {
                xid,
                relation_oid: m.relation_oid,
                new_tuple: self.tuple(m.relation_oid, &m.new_tuple)?,
            }),
            PgOutputMessage::Update(m) => PgOutputMessage::Update(pgoutput_codec::Update {
                xid,
                relation_oid: m.relation_oid,
                old_tuple: match &m.old_tuple {
                    Some(OldTuple::Key(t)) => Some(OldTuple::Key(self.tuple(m.relation_oid, t)?)),
                    Some(OldTuple::Old(t)) => Some(OldTuple::Old(self.tuple(m.relation_oid, t)?)),
                    None => None,
                },
                new_tuple: self.tuple(m.relation_oid, &m.new_tuple)?,
            }),
            PgOutputMessage::Delete(m) => PgOutputMessage::Delete(pgoutput_codec::Delete {
                xid,
                relation_oid: m.relation_oid,
                old_tuple: match &m.old_tuple {
                    OldTuple::Key(t) => OldTuple::Key(self.tuple(m.relation_oid, t)?),
                    OldTuple::Old(t) => OldTuple::Old(self.tuple(m.relation_oid, t)?),
                },
            }),
            PgOutputMessage::Truncate(m) => PgOutputMessage::Truncate(pgoutput_codec::Truncate {
                xid,
                options: m.options,
                relation_oids: m
                    .relation_oids
                    .iter()
                    .filter(|oid| self.published.contains(oid))
                    .collect(),
            }),
            PgOutputMessage::Message(m) => PgOutputMessage::Message(pgoutput_codec::Message {
                xid,
                flags: m.flags,
                lsn: m.lsn,
                prefix: PgStr::from(m.prefix.as_bytes()),
                content: pgoutput_codec::PgBytes::from(m.content.as_bytes()),
            }),
            PgOutputMessage::Type(m) => {
                let mut m = m.clone();
                m.xid = xid;
                PgOutputMessage::Type(m)
            }
            PgOutputMessage::Relation(m) => {
                let mut m = m.clone();
                m.xid = xid;
                PgOutputMessage::Relation(m)
            }
            other => other.clone(),
        };
        // Relation and Type frames carry 0/0, as PostgreSQL sends them.
        let lsn = if matches!(
            change,
            PgOutputMessage::Type(_) | PgOutputMessage::Relation(_)
        ) {
            Lsn(0)
        } else {
            lsn
        };
        self.emit(sink, lsn, &change)
    }

    /// Whether this client gets (some of) the change: its tables are in the client's
    /// publications, a Message only with `messages`.
    pub(super) fn visible(&self, message: &PgOutputMessage<'_>) -> bool {
        let published = |oid: &Oid| self.published.contains(oid);
        match message {
            PgOutputMessage::Insert(m) => published(&m.relation_oid),
            PgOutputMessage::Update(m) => published(&m.relation_oid),
            PgOutputMessage::Delete(m) => published(&m.relation_oid),
            PgOutputMessage::Relation(m) => published(&m.relation_oid),
            PgOutputMessage::Truncate(m) => m.relation_oids.iter().any(|oid| published(&oid)),
            PgOutputMessage::Message(_) => self.options.messages,
            _ => true,
        }
    }

    /// Whether a row change goes out exactly as the script holds it: the xid this client
    /// gets is the message's own and every value is in the client's form already. Most
    /// changes are (a text capture to a text client), and they are encoded straight from
    /// the script, with no view built.
    fn sent_as_scripted(&self, message: &PgOutputMessage<'_>, xid: Option<Xid>) -> bool {
        let in_form = |oid: Oid, tuple: &TupleData<'_>| {
            let Some(values) = tuple.columns.as_slice() else {
                return false;
            };
            let table = self.table(oid);
            values.iter().enumerate().all(|(index, value)| {
                !self.converts(value, table.and_then(|t| t.columns.get(index)))
            })
        };
        let old_in_form = |oid: Oid, old: &OldTuple<'_>| match old {
            OldTuple::Key(t) | OldTuple::Old(t) => in_form(oid, t),
        };
        match message {
            PgOutputMessage::Insert(m) => m.xid == xid && in_form(m.relation_oid, &m.new_tuple),
            PgOutputMessage::Update(m) => {
                m.xid == xid
                    && in_form(m.relation_oid, &m.new_tuple)
                    && m.old_tuple
                        .as_ref()
                        .is_none_or(|old| old_in_form(m.relation_oid, old))
            }
            PgOutputMessage::Delete(m) => m.xid == xid && old_in_form(m.relation_oid, &m.old_tuple),
            _ => false,
        }
    }

    /// Whether `value` of `column` goes to this client in the other form: binary to a
    /// text client, text to a binary one (where the type has a binary form here).
    fn converts(&self, value: &ColumnValue<'_>, column: Option<&Column>) -> bool {
        match (value, column) {
            (ColumnValue::Binary(_), Some(_)) => !self.options.binary,
            (ColumnValue::Text(_), Some(_)) => self.options.binary,
            _ => false,
        }
    }

    /// A view of `tuple` of table `oid` with every value in the form the client asked
    /// for (borrowed where it is already in that form).
    fn tuple<'t>(&self, oid: Oid, tuple: &'t TupleData<'_>) -> Result<TupleData<'t>, RenderError> {
        let table = self.table(oid);
        let column = |index: usize| table.and_then(|t| t.columns.get(index));
        let values = match tuple.columns.as_slice() {
            Some(columns) => {
                let mut values = Vec::with_capacity(columns.len());
                for (index, value) in columns.iter().enumerate() {
                    values.push(self.value(value, column(index), table)?);
                }
                values
            }
            // A tuple decoded from the wire, not built: rare in a script; its values are
            // converted alike, then copied (they borrow from the iteration).
            None => tuple
                .columns
                .iter()
                .enumerate()
                .map(|(index, value)| {
                    self.value(&value, column(index), table)
                        .map(pgoutput_codec::IntoOwned::into_owned)
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        Ok(TupleData::new(values))
    }

    /// A view of `value` in the form the client asked for (borrowed where it already is).
    fn value<'v>(
        &self,
        value: &'v ColumnValue<'_>,
        column: Option<&Column>,
        table: Option<&Table>,
    ) -> Result<ColumnValue<'v>, RenderError> {
        // A value of a known column in the other form than the client asked for.
        let other_form = match (value, column) {
            (ColumnValue::Text(text), Some(column)) if self.options.binary => {
                Some((text.as_bytes(), true, column))
            }
            (ColumnValue::Binary(binary), Some(column)) if !self.options.binary => {
                Some((binary.as_bytes(), false, column))
            }
            _ => None,
        };
        if let Some((bytes, to_binary, column)) = other_form {
            let form = table.map_or(ValueForm::Type(column.type_oid), |t| t.value_form(column));
            let converted = match form {
                ValueForm::Label => Some(Cow::Borrowed(bytes)),
                ValueForm::Type(oid) if to_binary => text_to_binary(oid, bytes).map(Cow::Owned),
                ValueForm::Type(oid) => binary_to_text(oid, bytes).map(Cow::Owned),
            };
            let converted = converted.ok_or_else(|| RenderError::NoConversion {
                table: table.map(Table::qualified_name).unwrap_or_default(),
                column: column.name.clone(),
                type_oid: column.type_oid,
                to_binary,
            })?;
            let converted: pgoutput_codec::PgBytes<'v> = match converted {
                Cow::Borrowed(bytes) => bytes.into(),
                Cow::Owned(bytes) => bytes.into(),
            };
            return Ok(if to_binary {
                ColumnValue::Binary(converted)
            } else {
                ColumnValue::Text(converted)
            });
        }
        Ok(match value {
            ColumnValue::Text(bytes) => ColumnValue::Text(bytes.as_bytes().into()),
            ColumnValue::Binary(bytes) => ColumnValue::Binary(bytes.as_bytes().into()),
            ColumnValue::Null => ColumnValue::Null,
            ColumnValue::UnchangedToast => ColumnValue::UnchangedToast,
        })
    }
}
