//! Parsing of `#[codec(...)]` and `#[since(...)]`.
//!
//! Every problem found here is recorded in [`Errors`] with the span of the offending key or
//! value, and parsing goes on, so that one build reports every mistake at once.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::{Attribute, Lit, LitInt, LitStr, Token};

/// Errors collected over one derive, reported together.
#[derive(Default)]
pub struct Errors(Vec<syn::Error>);

impl Errors {
    pub fn push(&mut self, error: syn::Error) {
        self.0.push(error);
    }

    pub fn spanned<T: ToTokens>(&mut self, tokens: T, message: impl std::fmt::Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    pub fn at(&mut self, span: Span, message: impl std::fmt::Display) {
        self.push(syn::Error::new(span, message));
    }

    /// `Ok` when nothing was recorded, else every error as one `compile_error!` stream.
    pub fn finish(self) -> Result<(), TokenStream> {
        let mut errors = self.0.into_iter();
        let Some(mut combined) = errors.next() else {
            return Ok(());
        };
        for error in errors {
            combined.combine(error);
        }
        Err(combined.to_compile_error())
    }
}

/// A `#[codec(tag = …)]` value and where it was written.
#[derive(Clone)]
pub struct Tag {
    pub byte: u8,
    pub span: Span,
}

/// `#[codec(len = i32)]`: a byte count of this integer type, then the bytes.
#[derive(Clone)]
pub struct Len {
    pub prefix: syn::Ident,
    pub span: Span,
}

/// `#[codec(stream = "…")]` on a message type: what it does to a session's stream blocks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StreamRole {
    /// Opens a block (Stream Start).
    Start,
    /// Closes a block (Stream Stop).
    Stop,
    /// Ends a streamed transaction, so it must come outside a block (Stream Commit,
    /// Abort, Prepare).
    Outside,
}

impl StreamRole {
    pub const ALL: [(&'static str, StreamRole); 3] = [
        ("start", StreamRole::Start),
        ("stop", StreamRole::Stop),
        ("outside", StreamRole::Outside),
    ];

    /// The runtime enum's variant name.
    pub fn variant(self) -> &'static str {
        match self {
            StreamRole::Start => "Start",
            StreamRole::Stop => "Stop",
            StreamRole::Outside => "Outside",
        }
    }
}

/// `#[codec(role = "…")]` on a message type: what it does to the transaction it belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TransactionRole {
    /// Opens a transaction sent whole (Begin, Begin Prepare).
    Begin,
    /// One of the transaction's changes (Insert, Update, Delete, Truncate, Message).
    Change,
    /// Ends a transaction (Commit, Prepare, Stream Commit, Stream Prepare, Commit
    /// Prepared, Rollback Prepared).
    End,
    /// Aborts a streamed transaction, or only a subtransaction of it (Stream Abort).
    Abort,
}

impl TransactionRole {
    pub const ALL: [(&'static str, TransactionRole); 4] = [
        ("begin", TransactionRole::Begin),
        ("change", TransactionRole::Change),
        ("end", TransactionRole::End),
        ("abort", TransactionRole::Abort),
    ];

    /// The runtime enum's variant name.
    pub fn variant(self) -> &'static str {
        match self {
            TransactionRole::Begin => "Begin",
            TransactionRole::Change => "Change",
            TransactionRole::End => "End",
            TransactionRole::Abort => "Abort",
        }
    }
}

/// A `when = "…"` condition of `#[since]`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Condition {
    /// Inside a Stream Start/Stop block.
    Streamed,
    /// The session negotiated `streaming 'parallel'`.
    Parallel,
}

impl Condition {
    pub const ALL: [(&'static str, Condition); 2] = [
        ("streamed", Condition::Streamed),
        ("parallel", Condition::Parallel),
    ];

    pub fn names() -> String {
        Self::ALL
            .iter()
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `#[since(version = N, when = "…")]`: a field present from protocol `version` on, and
/// only when `when` holds.
#[derive(Clone)]
pub struct Since {
    pub version: u8,
    pub when: Option<Condition>,
    /// The whole attribute, for errors about where it was put.
    pub span_tokens: TokenStream,
}

pub const MIN_VERSION: u8 = 1;
pub const MAX_VERSION: u8 = 4;

/// The keys `#[codec(...)]` accepts in one position.
#[derive(Clone, Copy)]
pub enum Position {
    Container,
    Variant,
    Field,
}

impl Position {
    fn keys(self) -> &'static [&'static str] {
        match self {
            Position::Container => &["tag", "stream", "role", "crate"],
            Position::Variant => &["tag"],
            Position::Field => &[
                "len",
                "count",
                "count_before",
                "expect",
                "marker",
                "optional",
                "rest",
                "xid",
                "subxid",
                "transaction_end_lsn",
                "decision_lsn",
            ],
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Position::Container => "on a type",
            Position::Variant => "on an enum variant",
            Position::Field => "on a field",
        }
    }
}

/// `#[codec(count = u16)]`: a `Vec` whose element count is an integer of this type, right
/// before the elements or, with `count_before = field`, before an earlier field.
#[derive(Clone)]
pub struct Count {
    pub prefix: syn::Ident,
    pub span: Span,
    pub before: Option<syn::Ident>,
}

/// The integer types a count or length prefix can have.
pub const COUNT_TYPES: [&str; 5] = ["u8", "u16", "i16", "u32", "i32"];

/// A key that takes no value, like `optional`, and where it was written.
#[derive(Clone)]
pub struct Flag {
    pub span: Span,
}

/// Everything `#[codec(...)]` can say, for any position (and a field's `#[since]`): the
/// IR keeps this as parsed.
#[derive(Default)]
pub struct CodecAttrs {
    pub tag: Option<Tag>,
    /// `stream = "start" | "stop" | "outside"` on a message type.
    pub stream: Option<(StreamRole, Span)>,
    /// `role = "begin" | "change" | "end" | "abort"` on a message type.
    pub role: Option<(TransactionRole, Span)>,
    /// `xid`: the field holds the xid of the (top-level) transaction the message names.
    pub xid: Option<Flag>,
    /// `subxid`: the field holds the xid of the subtransaction the message names (an
    /// aborted one, or the one a change in a stream block was made in).
    pub subxid: Option<Flag>,
    /// `transaction_end_lsn`: the field holds the end of the transaction the message ends.
    pub transaction_end_lsn: Option<Flag>,
    /// `decision_lsn`: the field holds where the record deciding the message's transaction
    /// (its commit or prepare) starts.
    pub decision_lsn: Option<Flag>,
    /// `crate = "path"`: the runtime crate, when the dependency is renamed.
    pub krate: Option<syn::Path>,
    pub len: Option<Len>,
    pub count: Option<Count>,
    pub count_before: Option<syn::Ident>,
    /// `expect = 0`: the field always holds this value (flags PostgreSQL leaves unused).
    pub expect: Option<(syn::LitInt, Span)>,
    /// `marker = b'N'`: a constant byte on the wire right before the field.
    pub marker: Option<Tag>,
    /// `optional`: an `Option<T>` present when the next byte is one of `T`'s tags.
    pub optional: Option<Flag>,
    /// `rest`: every byte left in the message.
    pub rest: Option<Flag>,
    /// `#[since(...)]`, on a field.
    pub since: Option<Since>,
    /// Whether a `#[since]` was written at all (even one that did not parse).
    pub since_written: bool,
}

/// Parses every `#[codec(...)]` in `attrs`, accepting the keys of `position`.
pub fn parse_codec(attrs: &[Attribute], position: Position, errors: &mut Errors) -> CodecAttrs {
    let mut out = CodecAttrs::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("codec")) {
        let result = attr.parse_nested_meta(|meta| {
            let key = meta
                .path
                .get_ident()
                .map(|i| i.to_string())
                .unwrap_or_default();
            if !position.keys().contains(&key.as_str()) {
                let allowed = position.keys().join(", ");
                errors.spanned(
                    &meta.path,
                    format_args!(
                        "unknown key `{}` in #[codec] {}; expected one of: {allowed}",
                        meta.path.to_token_stream(),
                        position.describe(),
                    ),
                );
                return skip_value(&meta);
            }
            match key.as_str() {
                "tag" => {
                    let tag = parse_tag(&meta, errors)?;
                    set_once(&mut out.tag, tag, &meta, "tag", errors);
                }
                "stream" => {
                    let lit: LitStr = meta.value()?.parse()?;
                    let name = lit.value();
                    match StreamRole::ALL.iter().find(|(n, _)| *n == name) {
                        Some(&(_, role)) => {
                            set_once(&mut out.stream, (role, lit.span()), &meta, "stream", errors)
                        }
                        None => errors.spanned(
                            &lit,
                            format_args!(
                                "unknown stream role `{name}`; expected one of: start, stop, outside"
                            ),
                        ),
                    }
                }
                "role" => {
                    let lit: LitStr = meta.value()?.parse()?;
                    let name = lit.value();
                    match TransactionRole::ALL.iter().find(|(n, _)| *n == name) {
                        Some(&(_, role)) => {
                            set_once(&mut out.role, (role, lit.span()), &meta, "role", errors)
                        }
                        None => errors.spanned(
                            &lit,
                            format_args!(
                                "unknown transaction role `{name}`; expected one of: begin, change, end, abort"
                            ),
                        ),
                    }
                }
                "xid" | "subxid" | "transaction_end_lsn" | "decision_lsn" => {
                    let flag = Flag {
                        span: meta.path.span_of_key(),
                    };
                    let slot = match key.as_str() {
                        "xid" => &mut out.xid,
                        "subxid" => &mut out.subxid,
                        "transaction_end_lsn" => &mut out.transaction_end_lsn,
                        _ => &mut out.decision_lsn,
                    };
                    set_once(slot, flag, &meta, &key, errors);
                }
                "crate" => {
                    let lit: LitStr = meta.value()?.parse()?;
                    match lit.parse::<syn::Path>() {
                        Ok(path) => set_once(&mut out.krate, path, &meta, "crate", errors),
                        Err(_) => errors.spanned(
                            &lit,
                            "`crate` takes the path of the runtime crate as a string, like \
                             crate = \"my_codec\"",
                        ),
                    }
                }
                "len" => {
                    let len = parse_len(&meta, errors)?;
                    set_once(&mut out.len, len, &meta, "len", errors);
                }
                "count" => {
                    let span = meta.path.span_of_key();
                    let prefix: syn::Ident = meta.value()?.parse()?;
                    if !COUNT_TYPES.contains(&prefix.to_string().as_str()) {
                        errors.spanned(
                            &prefix,
                            format_args!(
                                "unsupported count type `{prefix}`; expected one of: {}",
                                COUNT_TYPES.join(", ")
                            ),
                        );
                    }
                    let count = Count {
                        prefix,
                        span,
                        before: None,
                    };
                    set_once(&mut out.count, count, &meta, "count", errors);
                }
                "count_before" => {
                    let field: syn::Ident = meta.value()?.parse()?;
                    set_once(&mut out.count_before, field, &meta, "count_before", errors);
                }
                "expect" => {
                    let span = meta.path.span_of_key();
                    let lit: LitInt = meta.value()?.parse()?;
                    if lit.base10_parse::<u64>().is_err() {
                        errors.spanned(
                            &lit,
                            "`expect` takes a non-negative integer, like expect = 0",
                        );
                    }
                    set_once(&mut out.expect, (lit, span), &meta, "expect", errors);
                }
                "marker" => {
                    let marker = parse_tag(&meta, errors)?;
                    set_once(&mut out.marker, marker, &meta, "marker", errors);
                }
                "optional" => {
                    let flag = Flag {
                        span: meta.path.span_of_key(),
                    };
                    set_once(&mut out.optional, flag, &meta, "optional", errors);
                }
                "rest" => {
                    let flag = Flag {
                        span: meta.path.span_of_key(),
                    };
                    set_once(&mut out.rest, flag, &meta, "rest", errors);
                }
                _ => unreachable!("key list and match arms agree"),
            }
            Ok(())
        });
        if let Err(err) = result {
            errors.push(err);
        }
    }
    match (&mut out.count, out.count_before.take()) {
        (Some(count), before) => count.before = before,
        (None, Some(before)) => errors.spanned(
            &before,
            "`count_before` places a `count`: add #[codec(count = u32, count_before = …)]",
        ),
        (None, None) => {}
    }
    out
}

/// Parses the one `#[since(...)]` a field may have.
pub fn parse_since(attrs: &[Attribute], errors: &mut Errors) -> Option<Since> {
    let mut found: Option<Since> = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("since")) {
        if found.is_some() {
            errors.spanned(
                attr,
                "duplicate #[since] attribute; a field has one introduction point: merge them",
            );
            continue;
        }
        let mut version: Option<u8> = None;
        let mut when: Option<Condition> = None;
        let mut valid = true;
        let result = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("version") {
                let lit: LitInt = meta.value()?.parse()?;
                let parsed = lit
                    .base10_parse::<u64>()
                    .ok()
                    .filter(|v| (u64::from(MIN_VERSION)..=u64::from(MAX_VERSION)).contains(v));
                match parsed {
                    Some(v) => set_once(&mut version, v as u8, &meta, "version", errors),
                    None => {
                        valid = false;
                        errors.spanned(
                            &lit,
                            format_args!(
                                "protocol version {lit} is out of range; pgoutput versions are \
                                 {MIN_VERSION} to {MAX_VERSION}"
                            ),
                        );
                    }
                }
            } else if meta.path.is_ident("when") {
                let lit: LitStr = meta.value()?.parse()?;
                let name = lit.value();
                match Condition::ALL.iter().find(|(n, _)| *n == name) {
                    Some(&(_, condition)) => set_once(&mut when, condition, &meta, "when", errors),
                    None => {
                        valid = false;
                        errors.spanned(
                            &lit,
                            format_args!(
                                "unknown condition `{name}`; expected one of: {}",
                                Condition::names()
                            ),
                        );
                    }
                }
            } else {
                valid = false;
                errors.spanned(
                    &meta.path,
                    format_args!(
                        "unknown key `{}` in #[since]; expected one of: version, when",
                        meta.path.to_token_stream()
                    ),
                );
                skip_value(&meta)?;
            }
            Ok(())
        });
        if let Err(err) = result {
            errors.push(err);
            valid = false;
        }
        match version {
            Some(version) => {
                found = Some(Since {
                    version,
                    when,
                    span_tokens: attr.to_token_stream(),
                })
            }
            None if valid => errors.spanned(
                attr,
                "#[since] needs the protocol version that introduced the field: \
                 #[since(version = N)] or #[since(version = N, when = \"…\")]",
            ),
            None => {}
        }
    }
    found
}

fn parse_tag(meta: &ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<Tag> {
    let lit: Lit = meta.value()?.parse()?;
    let span = lit.span();
    let byte = match &lit {
        Lit::Byte(b) => Some(b.value()),
        Lit::Int(i) => i.base10_parse::<u8>().ok(),
        _ => None,
    };
    match byte {
        Some(byte) => Ok(Tag { byte, span }),
        None => {
            errors.spanned(
                &lit,
                "a tag is one byte: write it as a byte literal like b'M' or an integer 0 to 255",
            );
            Ok(Tag { byte: 0, span })
        }
    }
}

fn parse_len(meta: &ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<Len> {
    let span = meta.path.span_of_key();
    let prefix: syn::Ident = meta.value()?.parse()?;
    if !COUNT_TYPES.contains(&prefix.to_string().as_str()) {
        errors.spanned(
            &prefix,
            format_args!(
                "unsupported length prefix `{prefix}`; expected one of: {} (pgoutput's own \
                 byte fields use i32)",
                COUNT_TYPES.join(", ")
            ),
        );
    }
    Ok(Len { prefix, span })
}

/// Stores `value` unless the key was given before, which is an error at the second one.
fn set_once<T>(
    slot: &mut Option<T>,
    value: T,
    meta: &ParseNestedMeta<'_>,
    key: &str,
    errors: &mut Errors,
) {
    if slot.is_some() {
        errors.spanned(&meta.path, format_args!("duplicate `{key}`; give it once"));
    } else {
        *slot = Some(value);
    }
}

/// Consumes `= value` after a key we reported as unknown, so parsing can go on.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        let value = meta.value()?;
        while !value.is_empty() && !value.peek(Token![,]) {
            value.parse::<TokenTree>()?;
        }
    } else if meta.input.peek(syn::token::Paren) {
        meta.parse_nested_meta(|_| Ok(()))?;
    }
    Ok(())
}

trait SpanOfKey {
    fn span_of_key(&self) -> Span;
}

impl SpanOfKey for syn::Path {
    fn span_of_key(&self) -> Span {
        self.segments
            .first()
            .map(|s| s.ident.span())
            .unwrap_or_else(Span::call_site)
    }
}
