//! Rules that span more than one attribute: checked after parsing, before any code is
//! generated, each reported with the span of the attribute or item to fix.

use syn::GenericParam;

use crate::ast::{self, Container, Data, Field, Style};
use crate::attr::{Condition, Errors, MIN_VERSION};

pub fn check(container: &Container<'_>, errors: &mut Errors) {
    check_generics(container, errors);
    match &container.data {
        Data::Struct(_, fields) => check_fields(fields, errors),
        Data::Enum(variants) => {
            if let Some(tag) = &container.attrs.tag {
                errors.at(
                    tag.span,
                    "an enum has no tag of its own: put #[codec(tag = …)] on each variant",
                );
            }
            if variants.len() > 255 {
                errors.spanned(
                    container.ident,
                    "a tagged enum has at most 255 variants: a tag byte can tell no more apart",
                );
            }
            let mut seen: Vec<(u8, &syn::Ident)> = Vec::new();
            for variant in variants {
                check_fields(&variant.fields, errors);
                match &variant.tag {
                    Some(tag) => {
                        if let Some((_, first)) = seen.iter().find(|(byte, _)| *byte == tag.byte) {
                            errors.at(
                                tag.span,
                                format_args!(
                                    "duplicate tag: variant `{}` already uses the tag byte {}; \
                                     each variant needs its own",
                                    first,
                                    describe_byte(tag.byte)
                                ),
                            );
                        }
                        seen.push((tag.byte, variant.ident));
                    }
                    None if variant.style == Style::Tuple && variant.fields.len() == 1 => {
                        // A newtype variant without a tag dispatches on its inner message
                        // type's `Tagged::TAG`.
                    }
                    None => errors.spanned(
                        variant.original,
                        format_args!(
                            "variant `{}` needs a tag: add #[codec(tag = b'…')] (or make it a \
                             newtype variant around a message type that has a tag)",
                            variant.ident
                        ),
                    ),
                }
            }
        }
    }
}

fn check_generics(container: &Container<'_>, errors: &mut Errors) {
    let mut lifetimes = 0;
    for param in &container.input.generics.params {
        match param {
            GenericParam::Lifetime(_) => {
                lifetimes += 1;
                if lifetimes > 1 {
                    errors.spanned(
                        param,
                        "at most one lifetime parameter: the lifetime of the decoded input",
                    );
                }
            }
            GenericParam::Type(_) | GenericParam::Const(_) => errors.spanned(
                param,
                "Decode/Encode cannot be derived for generic types: use concrete field types",
            ),
        }
    }
}

fn check_fields(fields: &[Field<'_>], errors: &mut Errors) {
    for (index, field) in fields.iter().enumerate() {
        check_shape_keys(field, errors);
        if let Some(count) = &field.attrs.count {
            if !ast::is_sequence(field.wire_ty()) {
                errors.at(
                    count.span,
                    format_args!(
                        "#[codec(count = …)] is for repeated parts: the field must be a `Vec<_>` \
                         or a `Seq<'a, _>` (decoded without allocating), not `{}`",
                        ast::type_string(field.wire_ty())
                    ),
                );
            }
            if let Some(before) = &count.before {
                if !fields[..index].iter().any(|f| *before == f.name()) {
                    errors.spanned(
                        before,
                        format_args!(
                            "`count_before = {before}` names no earlier field: the count goes \
                             on the wire right before that field"
                        ),
                    );
                }
            }
        }
        if let Some((_, span)) = &field.attrs.expect {
            if !ast::is_unsigned_int(field.ty) || field.attrs.since.is_some() {
                errors.at(
                    *span,
                    format_args!(
                        "#[codec(expect = …)] is for an unsigned integer field that always holds \
                         one value, not `{}`",
                        ast::type_string(field.ty)
                    ),
                );
            }
        }
        if let Some(optional) = &field.attrs.optional {
            if ast::option_inner(field.ty).is_none()
                || field.attrs.since.is_some()
                || field.attrs.marker.is_some()
            {
                errors.at(
                    optional.span,
                    "#[codec(optional)] is for an `Option<T>` field without #[since] or marker: \
                     it is present when the next byte is one of `T`'s tags",
                );
            }
        }
        if let Some(rest) = &field.attrs.rest {
            if index + 1 != fields.len() || !ast::is_byte_container(field.wire_ty()) {
                errors.at(
                    rest.span,
                    "#[codec(rest)] takes every byte left: it must be the last field, of type \
                     `PgBytes<'a>`, `Cow<'a, [u8]>` or `Vec<u8>`",
                );
            }
        }
        if let Some(since) = &field.attrs.since {
            if ast::option_inner(field.ty).is_none() {
                errors.spanned(
                    &since.span_tokens,
                    format_args!(
                        "a #[since] field must be an `Option<_>`: it is absent from the wire \
                         in older protocol versions or other contexts; change the type to \
                         `Option<{}>`",
                        ast::type_string(field.ty)
                    ),
                );
            }
            if since.when == Some(Condition::Parallel) && since.version < 4 {
                errors.spanned(
                    &since.span_tokens,
                    format_args!(
                        "`when = \"parallel\"` needs `version = 4` or higher: PostgreSQL \
                         allows parallel streaming only from protocol 4 (version = {} can \
                         never be parallel)",
                        since.version
                    ),
                );
            }
            if since.version == MIN_VERSION && since.when.is_none() {
                errors.spanned(
                    &since.span_tokens,
                    "#[since(version = 1)] without `when` is always present: remove the \
                     attribute and use a plain field",
                );
            }
        }
        let attrs = &field.attrs;
        let plain = !attrs.since_written
            && attrs.optional.is_none()
            && attrs.len.is_none()
            && attrs.count.is_none()
            && attrs.rest.is_none();
        if plain {
            if let Some(inner) = ast::option_inner(field.ty) {
                errors.spanned(
                    field.ty,
                    format_args!(
                        "an `Option` field needs to say when it is on the wire: \
                         #[since(version = N)] (from protocol N on, maybe with `when`), or \
                         #[codec(optional)] (when the next byte is one of `{}`'s tags)",
                        ast::type_string(inner)
                    ),
                );
            }
        }
        if let Some(len) = &field.attrs.len {
            if !ast::is_byte_container(field.wire_ty()) {
                errors.at(
                    len.span,
                    format_args!(
                        "#[codec(len = …)] is for raw byte fields: the field must be \
                         `PgBytes<'a>`, `Cow<'a, [u8]>` or `Vec<u8>`, not `{}`",
                        ast::type_string(field.wire_ty())
                    ),
                );
            }
        }
    }
}

/// A field has at most one wire shape: `len`, `count` or `rest`.
fn check_shape_keys(field: &Field<'_>, errors: &mut Errors) {
    let shapes = [
        field.attrs.len.as_ref().map(|l| ("len", l.span)),
        field
            .attrs
            .count
            .as_ref()
            .map(|count| ("count", count.span)),
        field.attrs.rest.as_ref().map(|r| ("rest", r.span)),
    ];
    let mut given = shapes.iter().flatten();
    if let Some((first, _)) = given.next() {
        for (other, span) in given {
            errors.at(
                *span,
                format_args!("`{other}` conflicts with `{first}`: a field has one wire shape"),
            );
        }
    }
}

/// A tag byte as people write it: `b'M' (0x4d)`, or `0x01`.
pub fn describe_byte(byte: u8) -> String {
    if byte.is_ascii_graphic() && byte != b'\\' && byte != b'\'' {
        format!("b'{}' (0x{byte:02x})", byte as char)
    } else {
        format!("0x{byte:02x}")
    }
}
