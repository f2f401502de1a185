//! The intermediate representation: the input type with its attributes parsed.

use syn::{Data as SynData, DeriveInput, Fields, Ident, Lifetime, Member, Type};

use crate::attr::{self, CodecAttrs, Errors, Position, Tag};

pub struct Container<'a> {
    pub ident: &'a Ident,
    pub input: &'a DeriveInput,
    /// `#[codec(tag = …, stream = …, crate = …)]` on the type.
    pub attrs: CodecAttrs,
    pub data: Data<'a>,
}

pub enum Data<'a> {
    Struct(Style, Vec<Field<'a>>),
    Enum(Vec<Variant<'a>>),
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Named,
    Tuple,
    Unit,
}

pub struct Variant<'a> {
    pub ident: &'a Ident,
    pub original: &'a syn::Variant,
    pub tag: Option<Tag>,
    pub style: Style,
    pub fields: Vec<Field<'a>>,
}

pub struct Field<'a> {
    pub member: Member,
    pub ty: &'a Type,
    /// `#[codec(...)]` and `#[since(...)]` as parsed.
    pub attrs: CodecAttrs,
}

impl<'a> Container<'a> {
    /// Parses the input's attributes. `None` for unions, which cannot be supported.
    pub fn from_ast(input: &'a DeriveInput, errors: &mut Errors) -> Option<Self> {
        let codec = attr::parse_codec(&input.attrs, Position::Container, errors);
        let data = match &input.data {
            SynData::Struct(data) => {
                let (style, fields) = fields_from_ast(&data.fields, errors);
                Data::Struct(style, fields)
            }
            SynData::Enum(data) => Data::Enum(
                data.variants
                    .iter()
                    .map(|variant| {
                        let codec = attr::parse_codec(&variant.attrs, Position::Variant, errors);
                        let (style, fields) = fields_from_ast(&variant.fields, errors);
                        Variant {
                            ident: &variant.ident,
                            original: variant,
                            tag: codec.tag,
                            style,
                            fields,
                        }
                    })
                    .collect(),
            ),
            SynData::Union(data) => {
                errors.at(
                    data.union_token.span,
                    "unions cannot derive Decode/Encode: use a struct, or an enum with a \
                     #[codec(tag = …)] on each variant",
                );
                return None;
            }
        };
        Some(Container {
            ident: &input.ident,
            input,
            attrs: codec,
            data,
        })
    }

    /// The type's one lifetime parameter, the lifetime of borrowed input, if it has one.
    pub fn lifetime(&self) -> Option<&'a Lifetime> {
        self.input.generics.lifetimes().next().map(|l| &l.lifetime)
    }

    /// `#[codec(tag = …)]` on the type: the message's leading tag byte.
    pub fn tag(&self) -> Option<&Tag> {
        self.attrs.tag.as_ref()
    }

    /// The type's name as a string, for errors and `Tagged::NAME`.
    pub fn name(&self) -> String {
        self.ident.to_string()
    }
}

fn fields_from_ast<'a>(fields: &'a Fields, errors: &mut Errors) -> (Style, Vec<Field<'a>>) {
    let style = match fields {
        Fields::Named(_) => Style::Named,
        Fields::Unnamed(_) => Style::Tuple,
        Fields::Unit => Style::Unit,
    };
    let fields = fields
        .iter()
        .enumerate()
        .map(|(i, field)| {
            let mut attrs = attr::parse_codec(&field.attrs, Position::Field, errors);
            attrs.since = attr::parse_since(&field.attrs, errors);
            attrs.since_written = field.attrs.iter().any(|a| a.path().is_ident("since"));
            Field {
                member: match &field.ident {
                    Some(ident) => Member::Named(ident.clone()),
                    None => Member::Unnamed(i.into()),
                },
                ty: &field.ty,
                attrs,
            }
        })
        .collect();
    (style, fields)
}

impl Field<'_> {
    /// The field's name as errors show it: `xid`, or `0` for a tuple field.
    pub fn name(&self) -> String {
        match &self.member {
            Member::Named(ident) => ident.to_string(),
            Member::Unnamed(index) => index.index.to_string(),
        }
    }

    /// The type on the wire: `T` for a `#[since]` or `optional` field of type `Option<T>`.
    pub fn wire_ty(&self) -> &Type {
        if self.attrs.since.is_some() || self.attrs.optional.is_some() {
            option_inner(self.ty).unwrap_or(self.ty)
        } else {
            self.ty
        }
    }
}

/// Whether `ty` is a `Vec<_>` or a `Seq<'_, _>`, the types `count` can fill.
pub fn is_sequence(ty: &Type) -> bool {
    if generic_arg(ty, "Vec").is_some() {
        return true;
    }
    let Type::Path(path) = ty else { return false };
    path.qself.is_none()
        && path
            .path
            .segments
            .last()
            .is_some_and(|last| last.ident == "Seq")
}

/// `T` when `ty` is `Option<T>` (also spelled `core::option::Option<T>`).
pub fn option_inner(ty: &Type) -> Option<&Type> {
    generic_arg(ty, "Option")
}

/// `T` when `ty` is `Name<T>`, by the last path segment.
pub fn generic_arg<'t>(ty: &'t Type, name: &str) -> Option<&'t Type> {
    let Type::Path(path) = ty else { return None };
    if path.qself.is_some() {
        return None;
    }
    let last = path.path.segments.last()?;
    if last.ident != name {
        return None;
    }
    match &last.arguments {
        syn::PathArguments::AngleBracketed(args) if args.args.len() == 1 => match &args.args[0] {
            syn::GenericArgument::Type(inner) => Some(inner),
            _ => None,
        },
        _ => None,
    }
}

/// Whether `ty` holds raw bytes that `#[codec(len = …)]` can carry: `PgBytes<'_>`,
/// `Cow<'_, [u8]>` or `Vec<u8>`.
pub fn is_byte_container(ty: &Type) -> bool {
    let Type::Path(path) = ty else { return false };
    let Some(last) = path.path.segments.last() else {
        return false;
    };
    if last.ident == "PgBytes" {
        return true;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return false;
    };
    let types: Vec<&Type> = args
        .args
        .iter()
        .filter_map(|arg| match arg {
            syn::GenericArgument::Type(ty) => Some(ty),
            _ => None,
        })
        .collect();
    match (last.ident.to_string().as_str(), types.as_slice()) {
        ("Cow", [Type::Slice(slice)]) => is_u8(&slice.elem),
        ("Vec", [elem]) => is_u8(elem),
        _ => false,
    }
}

fn is_u8(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none() && p.path.is_ident("u8"))
}

/// A type as a person would write it: `PgStr<'a>`, not `PgStr < 'a >`.
pub fn type_string(ty: &Type) -> String {
    let tokens = quote::ToTokens::to_token_stream(ty).to_string();
    let mut out = String::with_capacity(tokens.len());
    let mut in_lifetime = false;
    for c in tokens.chars().filter(|c| *c != ' ') {
        if in_lifetime && !(c.is_alphanumeric() || c == '_') {
            in_lifetime = false;
            if !matches!(c, '>' | ',' | ')' | ']') {
                out.push(' ');
            }
        }
        out.push(c);
        match c {
            '\'' => in_lifetime = true,
            ',' => out.push(' '),
            _ => {}
        }
    }
    out
}

/// Whether `ty` is a primitive unsigned integer, which `expect` can compare.
pub fn is_unsigned_int(ty: &Type) -> bool {
    ["u8", "u16", "u32", "u64"]
        .iter()
        .any(|name| matches!(ty, Type::Path(p) if p.qself.is_none() && p.path.is_ident(name)))
}
