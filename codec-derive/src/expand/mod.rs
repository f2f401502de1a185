//! Code generation. Each derive expands to `const _: () = { … };` holding `#[automatically_derived]`
//! impls that name everything by absolute path (`::core::…`, `::pgoutput_codec::…`), so the
//! output works in `#![no_implicit_prelude]` modules and cannot collide with user names.
//! The generated functions' own variables use mixed-site hygiene for the same reason.

pub mod decode;
pub mod encode;
pub mod owned;
pub mod shape;

use proc_macro2::{Ident, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{Lifetime, LitByte, Member};

use crate::ast::{Container, Data, Field, Style, Variant};
use crate::attr::{Condition, Since};

thread_local! {
    /// The runtime crate's path for the expansion under way: `::pgoutput_codec`, or what
    /// `#[codec(crate = "…")]` says.
    static CRATE_PATH: std::cell::RefCell<Option<TokenStream>> = const { std::cell::RefCell::new(None) };
}

/// Runs `generate` with the container's runtime crate path in effect.
pub fn with_crate_path(
    container: &Container<'_>,
    generate: impl FnOnce() -> TokenStream,
) -> TokenStream {
    let path = container
        .attrs
        .krate
        .as_ref()
        .map_or_else(|| quote!(::pgoutput_codec), |path| quote!(#path));
    CRATE_PATH.with(|cell| *cell.borrow_mut() = Some(path));
    let out = generate();
    CRATE_PATH.with(|cell| *cell.borrow_mut() = None);
    out
}

/// The runtime crate, by absolute path (or as `#[codec(crate = …)]` names it).
fn krate() -> TokenStream {
    CRATE_PATH
        .with(|cell| cell.borrow().clone())
        .unwrap_or_else(|| quote!(::pgoutput_codec))
}

/// A variable of the generated code, invisible to (and unaffected by) user code.
fn internal(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

/// A binding for `field` when matching an enum variant: `f0`, `f_xid`.
fn binding(field: &Field<'_>) -> Ident {
    match &field.member {
        Member::Named(ident) => format_ident!("f_{}", ident, span = Span::mixed_site()),
        Member::Unnamed(index) => format_ident!("f{}", index.index, span = Span::mixed_site()),
    }
}

/// `path`, `path(v0, v1)` or `path { a: va, b: vb }`, as `style` requires: the one shape
/// that builds a value and matches a variant alike.
fn with_fields(
    path: TokenStream,
    style: Style,
    fields: &[Field<'_>],
    values: impl IntoIterator<Item = impl ToTokens>,
) -> TokenStream {
    let values = values.into_iter();
    match style {
        Style::Unit => path,
        Style::Tuple => quote!(#path(#(#values),*)),
        Style::Named => {
            let members = fields.iter().map(|field| &field.member);
            quote!(#path { #(#members: #values),* })
        }
    }
}

/// The pattern `Self::Variant(f0, …)` / `Self::Variant { a: f_a, … }` binding every field
/// of `variant`, and those bindings.
fn variant_pattern(variant: &Variant<'_>) -> (TokenStream, Vec<Ident>) {
    let ident = variant.ident;
    let bindings: Vec<Ident> = variant.fields.iter().map(binding).collect();
    let pattern = with_fields(
        quote!(Self::#ident),
        variant.style,
        &variant.fields,
        &bindings,
    );
    (pattern, bindings)
}

/// A tag byte as a literal: `b'M'`.
fn tag_literal(byte: u8) -> LitByte {
    LitByte::new(byte, Span::call_site())
}

/// The lifetime the impls use for decoded input: the type's own, or `'_` for a type that
/// borrows nothing (so that no made-up name shows in compiler messages).
fn input_lifetime(container: &Container<'_>) -> Lifetime {
    container
        .lifetime()
        .cloned()
        .unwrap_or_else(|| Lifetime::new("'_", Span::call_site()))
}

/// `impl<'a>` for a type with a lifetime, `impl` for one without.
fn decode_impl_generics(container: &Container<'_>) -> TokenStream {
    match container.lifetime() {
        Some(lifetime) => quote!(<#lifetime>),
        None => TokenStream::new(),
    }
}

/// `tokens` with the container's lifetime replaced by `'static`, for use in `const` items,
/// which cannot name the impl's lifetime.
fn with_static_lifetime(tokens: impl ToTokens, container: &Container<'_>) -> TokenStream {
    let Some(lifetime) = container.lifetime() else {
        return tokens.into_token_stream();
    };
    fn replace(stream: TokenStream, name: &Ident) -> TokenStream {
        let mut out = Vec::new();
        let mut tokens = stream.into_iter().peekable();
        while let Some(token) = tokens.next() {
            match token {
                TokenTree::Punct(p) if p.as_char() == '\'' => match tokens.peek() {
                    Some(TokenTree::Ident(ident)) if ident == name => {
                        tokens.next();
                        out.extend(quote!('static));
                    }
                    _ => out.push(TokenTree::Punct(p)),
                },
                TokenTree::Group(group) => {
                    let mut new =
                        proc_macro2::Group::new(group.delimiter(), replace(group.stream(), name));
                    new.set_span(group.span());
                    out.push(TokenTree::Group(new));
                }
                other => out.push(other),
            }
        }
        out.into_iter().collect()
    }
    replace(tokens.into_token_stream(), &lifetime.ident)
}

/// A `#[since]` condition as a runtime check on the context, and in words for errors.
fn condition(since: &Since) -> (TokenStream, String) {
    let krate = krate();
    let ctx = internal("ctx");
    let mut checks = Vec::new();
    let mut words = Vec::new();
    if since.version > crate::attr::MIN_VERSION {
        let variant = format_ident!("V{}", since.version);
        checks.push(quote!(#ctx.version() >= #krate::ProtocolVersion::#variant));
        words.push(format!("protocol version is {} or higher", since.version));
    }
    match since.when {
        Some(Condition::Streamed) => {
            checks.push(quote!(#ctx.in_stream()));
            words.push("inside a Stream Start/Stop block".to_owned());
        }
        Some(Condition::Parallel) => {
            checks.push(quote!(#ctx.is_parallel()));
            words.push("streaming is parallel".to_owned());
        }
        None => {}
    }
    (quote!(#(#checks)&&*), words.join(" and "))
}

/// Where errors in a group of fields are reported: `Message`, `TupleColumn::Text`.
pub(crate) struct Scope {
    pub message: String,
    /// Newtypes are transparent: their errors belong to the enclosing field, so their one
    /// field adds no frame of its own.
    pub transparent: bool,
}

impl Scope {
    /// For code that reports no errors (minimum lengths).
    fn opaque() -> Self {
        Scope {
            message: String::new(),
            transparent: true,
        }
    }

    fn new(container: &Container<'_>, variant: Option<&Ident>, fields: &[Field<'_>]) -> Self {
        let name = container.name();
        let transparent = variant.is_none()
            && fields.len() == 1
            && matches!(fields[0].member, Member::Unnamed(_))
            && fields[0].attrs.since.is_none()
            && fields[0].attrs.marker.is_none()
            && fields[0].attrs.expect.is_none();
        Scope {
            message: match variant {
                Some(variant) => format!("{name}::{variant}"),
                None => name,
            },
            transparent,
        }
    }
}

/// The `Vec` fields whose count goes on the wire right before `field`
/// (`count_before = field`).
fn counts_placed_before<'f, 'a>(
    fields: &'f [Field<'a>],
    field: &Field<'_>,
) -> impl Iterator<Item = (usize, &'f Field<'a>)> {
    let name = field.name();
    fields.iter().enumerate().filter(move |(_, f)| {
        f.attrs
            .count
            .as_ref()
            .and_then(|c| c.before.as_ref())
            .is_some_and(|before| *before == name)
    })
}

/// The local holding the count read early for a `count_before` field.
pub(super) fn early_count(field: &Field<'_>) -> Ident {
    format_ident!("count_{}", binding(field), span = Span::mixed_site())
}

/// Wraps the whole expansion so its items cannot leak names into the user's module.
fn wrap(items: TokenStream) -> TokenStream {
    quote! {
        #[allow(non_upper_case_globals, unused_qualifications, clippy::all)]
        const _: () = {
            #items
        };
    }
}

/// `#[derive(Decode)]`.
pub fn derive_decode(container: &Container<'_>) -> TokenStream {
    wrap(decode::expand(container))
}

/// `#[derive(Encode)]`.
pub fn derive_encode(container: &Container<'_>) -> TokenStream {
    wrap(encode::expand(container))
}

/// `#[derive(IntoOwned)]`.
pub fn derive_into_owned(container: &Container<'_>) -> TokenStream {
    wrap(owned::expand(container))
}

/// `#[derive(Tagged)]`.
pub fn derive_tagged(container: &Container<'_>) -> TokenStream {
    wrap(tagged(container))
}

/// The trait a derive implements.
#[derive(Clone, Copy)]
pub enum Trait {
    Decode,
    Encode,
    IntoOwned,
    Tagged,
}

/// What a derive emits when the input has errors: the trait implemented with bodies that
/// cannot run and no use of the fields, so that the errors above are the only ones (no
/// "not implemented" at each use of the type).
pub fn fallback(container: &Container<'_>, implemented: Trait) -> TokenStream {
    // Types the derives refuse (generic ones) get no stand-in: it would not compile either.
    let generics = &container.input.generics;
    if generics.type_params().next().is_some()
        || generics.const_params().next().is_some()
        || generics.lifetimes().count() > 1
    {
        return TokenStream::new();
    }
    let krate = krate();
    let ident = container.ident;
    let (impl_generics, ty_generics, where_clause) = container.input.generics.split_for_impl();
    let unreachable = quote!(::core::unreachable!("the derive's input has errors"));
    let item = match implemented {
        Trait::Decode => {
            let lifetime = input_lifetime(container);
            let impl_generics = decode_impl_generics(container);
            quote! {
                impl #impl_generics #krate::Decode<#lifetime> for #ident #ty_generics #where_clause {
                    fn decode(
                        _: &mut #krate::Reader<#lifetime>,
                        _: #krate::Ctx,
                    ) -> ::core::result::Result<Self, #krate::DecodeError> {
                        #unreachable
                    }
                }
            }
        }
        Trait::Encode => quote! {
            impl #impl_generics #krate::Encode for #ident #ty_generics #where_clause {
                fn encode(
                    &self,
                    _: &mut #krate::Writer<'_>,
                    _: #krate::Ctx,
                ) -> ::core::result::Result<(), #krate::EncodeError> {
                    #unreachable
                }
                fn encoded_len(&self, _: #krate::Ctx) -> ::core::primitive::usize {
                    #unreachable
                }
            }
        },
        Trait::IntoOwned => {
            let owned = match container.lifetime() {
                Some(_) => quote!(#ident<'static>),
                None => quote!(Self),
            };
            quote! {
                impl #impl_generics #krate::IntoOwned for #ident #ty_generics #where_clause {
                    type Owned = #owned;
                    fn into_owned(self) -> Self::Owned {
                        #unreachable
                    }
                }
            }
        }
        Trait::Tagged => {
            let name = container.name();
            quote! {
                impl #impl_generics #krate::Tagged for #ident #ty_generics #where_clause {
                    const TAGS: #krate::TagSet = #krate::TagSet::EMPTY;
                    const NAME: &'static ::core::primitive::str = #name;
                    fn tag(&self) -> ::core::primitive::u8 {
                        #unreachable
                    }
                }
            }
        }
    };
    wrap(item)
}

/// `impl Tagged`: a tagged struct's one tag, or the union of an enum's variant tags; the
/// stream role `#[codec(stream = …)]` gives, the transaction role `#[codec(role = …)]`
/// gives and the xids its `#[codec(xid)]` and `#[codec(subxid)]` fields hold (dispatch
/// enums pass their variants', and list their variants as `KINDS`).
fn tagged(container: &Container<'_>) -> TokenStream {
    let krate = krate();
    let meaning = match &container.data {
        Data::Struct(_, fields) => struct_meaning(container, fields),
        Data::Enum(variants) => enum_meaning(container, variants),
    };
    let Meaning {
        transaction_role,
        xid,
        subxid,
        transaction_end_lsn,
        decision_lsn,
        kinds,
    } = match meaning {
        Ok(meaning) => meaning,
        Err(error) => return error.to_compile_error(),
    };
    let (tags, tag_of_value, role) = match &container.data {
        Data::Struct(..) => {
            let Some(tag) = container.tag() else {
                return syn::Error::new_spanned(
                    container.ident,
                    "#[derive(Tagged)] needs the message's tag byte: add #[codec(tag = b'…')]",
                )
                .to_compile_error();
            };
            let tag = tag_literal(tag.byte);
            let role = stream_role(container);
            (quote!(#krate::TagSet::single(#tag)), quote!(#tag), role)
        }
        Data::Enum(variants) => {
            let sets = variants
                .iter()
                .map(|v| decode::variant_tags(container, v, false));
            let arms = variants.iter().map(|variant| {
                let ident = variant.ident;
                match &variant.tag {
                    Some(tag) => {
                        let tag = tag_literal(tag.byte);
                        quote!(Self::#ident { .. } => #tag,)
                    }
                    None => {
                        let inner = internal("inner");
                        quote!(Self::#ident(#inner) => #krate::Tagged::tag(#inner),)
                    }
                }
            });
            let role_arms = variants.iter().map(|variant| {
                let ident = variant.ident;
                match &variant.tag {
                    Some(_) => quote!(Self::#ident { .. } => #krate::StreamRole::None,),
                    None => {
                        let inner = internal("inner");
                        quote!(Self::#ident(#inner) => #krate::Tagged::stream_role(#inner),)
                    }
                }
            });
            (
                quote!(#krate::TagSet::EMPTY #(.union(#sets))*),
                quote!(match self { #(#arms)* }),
                quote!(match self { #(#role_arms)* }),
            )
        }
    };
    let ident = container.ident;
    let (impl_generics, ty_generics, where_clause) = container.input.generics.split_for_impl();
    let name = container.name();
    quote! {
        #[automatically_derived]
        impl #impl_generics #krate::Tagged for #ident #ty_generics #where_clause {
            const TAGS: #krate::TagSet = #tags;
            const NAME: &'static ::core::primitive::str = #name;

            #[inline]
            fn tag(&self) -> ::core::primitive::u8 {
                #tag_of_value
            }

            #[inline]
            fn stream_role(&self) -> #krate::StreamRole {
                #role
            }

            #[inline]
            fn transaction_role(&self) -> #krate::TransactionRole {
                #transaction_role
            }

            #[inline]
            fn xid(&self) -> ::core::option::Option<#krate::Xid> {
                #xid
            }

            #[inline]
            fn subtransaction_xid(&self) -> ::core::option::Option<#krate::Xid> {
                #subxid
            }

            #[inline]
            fn transaction_end_lsn(&self) -> ::core::option::Option<#krate::Lsn> {
                #transaction_end_lsn
            }

            #[inline]
            fn decision_lsn(&self) -> ::core::option::Option<#krate::Lsn> {
                #decision_lsn
            }

            #kinds
        }
    }
}

/// What `Tagged` says of a value beyond its tag.
struct Meaning {
    transaction_role: TokenStream,
    xid: TokenStream,
    subxid: TokenStream,
    transaction_end_lsn: TokenStream,
    decision_lsn: TokenStream,
    /// `const KINDS` for a dispatch enum; nothing for a message (the default, empty).
    kinds: TokenStream,
}

/// A message's role from `#[codec(role = …)]`, its xids from the one field marked
/// `#[codec(xid)]` / `#[codec(subxid)]` (an `Xid` or an `Option<Xid>`), and its positions
/// from the one marked `#[codec(transaction_end_lsn)]` / `#[codec(decision_lsn)]` (an
/// `Lsn` or an `Option<Lsn>`).
fn struct_meaning(container: &Container<'_>, fields: &[Field<'_>]) -> syn::Result<Meaning> {
    let value = |field: &Field<'_>| {
        let member = &field.member;
        quote!(self.#member)
    };
    Ok(Meaning {
        transaction_role: transaction_role(container),
        xid: marked(fields, Mark::Xid)?.map_or_else(none, |f| Mark::Xid.read(f, value(f))),
        subxid: marked(fields, Mark::Subxid)?.map_or_else(none, |f| Mark::Subxid.read(f, value(f))),
        transaction_end_lsn: marked(fields, Mark::TransactionEndLsn)?
            .map_or_else(none, |f| Mark::TransactionEndLsn.read(f, value(f))),
        decision_lsn: marked(fields, Mark::DecisionLsn)?
            .map_or_else(none, |f| Mark::DecisionLsn.read(f, value(f))),
        kinds: TokenStream::new(),
    })
}

/// `None`, in the generated code.
pub(super) fn none() -> TokenStream {
    quote!(::core::option::Option::None)
}

/// What `StreamRole` a message's `#[codec(stream = …)]` gives it.
pub(super) fn stream_role(container: &Container<'_>) -> TokenStream {
    let krate = krate();
    match container.attrs.stream {
        Some((role, _)) => {
            let variant = format_ident!("{}", role.variant());
            quote!(#krate::StreamRole::#variant)
        }
        None => quote!(#krate::StreamRole::None),
    }
}

/// What `TransactionRole` a message's `#[codec(role = …)]` gives it.
pub(super) fn transaction_role(container: &Container<'_>) -> TokenStream {
    let krate = krate();
    match container.attrs.role {
        Some((role, _)) => {
            let variant = format_ident!("{}", role.variant());
            quote!(#krate::TransactionRole::#variant)
        }
        None => quote!(#krate::TransactionRole::None),
    }
}

/// A field attribute that tells `Tagged` (and a message's outline) something.
#[derive(Clone, Copy)]
pub(super) enum Mark {
    Xid,
    Subxid,
    TransactionEndLsn,
    DecisionLsn,
}

impl Mark {
    pub(super) const ALL: [Mark; 4] = [
        Mark::Xid,
        Mark::Subxid,
        Mark::TransactionEndLsn,
        Mark::DecisionLsn,
    ];

    fn key(self) -> &'static str {
        match self {
            Mark::Xid => "xid",
            Mark::Subxid => "subxid",
            Mark::TransactionEndLsn => "transaction_end_lsn",
            Mark::DecisionLsn => "decision_lsn",
        }
    }

    pub(super) fn on(self, field: &Field<'_>) -> bool {
        let attrs = &field.attrs;
        match self {
            Mark::Xid => attrs.xid.is_some(),
            Mark::Subxid => attrs.subxid.is_some(),
            Mark::TransactionEndLsn => attrs.transaction_end_lsn.is_some(),
            Mark::DecisionLsn => attrs.decision_lsn.is_some(),
        }
    }

    /// The `Option` the field marked so holds, from `value` (its place or its local).
    pub(super) fn read(self, field: &Field<'_>, value: TokenStream) -> TokenStream {
        let krate = krate();
        let ty = field.ty;
        match self {
            Mark::Xid | Mark::Subxid => {
                quote_spanned!(ty.span()=> <#ty as #krate::__private::XidField>::xid(&#value))
            }
            Mark::TransactionEndLsn | Mark::DecisionLsn => {
                quote_spanned!(ty.span()=> <#ty as #krate::__private::LsnField>::lsn(&#value))
            }
        }
    }
}

/// The one field `mark` is on, if any (a second is an error).
fn marked<'f, 'a>(fields: &'f [Field<'a>], mark: Mark) -> syn::Result<Option<&'f Field<'a>>> {
    let mut marked = fields.iter().filter(|f| mark.on(f));
    let first = marked.next();
    if let Some(second) = marked.next() {
        return Err(syn::Error::new_spanned(
            &second.member,
            format_args!(
                "a second `#[codec({})]` field; a message names one",
                mark.key()
            ),
        ));
    }
    Ok(first)
}

/// A dispatch enum passes each question to its variant's message; a variant with a tag of
/// its own (a unit or field-less variant) has no role and names no transaction.
fn enum_meaning(container: &Container<'_>, variants: &[Variant<'_>]) -> syn::Result<Meaning> {
    let krate = krate();
    let inner = internal("inner");
    let forward = |method: TokenStream, none: TokenStream| {
        let arms = variants.iter().map(|variant| {
            let ident = variant.ident;
            match &variant.tag {
                Some(_) => quote!(Self::#ident { .. } => #none,),
                None => quote!(Self::#ident(#inner) => #krate::Tagged::#method(#inner),),
            }
        });
        quote!(match self { #(#arms)* })
    };
    let kinds = variants.iter().map(|variant| {
        let name = snake_case(&variant.ident.to_string());
        let tags = decode::variant_tags(container, variant, false);
        quote!((#name, #tags))
    });
    Ok(Meaning {
        transaction_role: forward(
            quote!(transaction_role),
            quote!(#krate::TransactionRole::None),
        ),
        xid: forward(quote!(xid), quote!(::core::option::Option::None)),
        subxid: forward(
            quote!(subtransaction_xid),
            quote!(::core::option::Option::None),
        ),
        transaction_end_lsn: forward(
            quote!(transaction_end_lsn),
            quote!(::core::option::Option::None),
        ),
        decision_lsn: forward(quote!(decision_lsn), quote!(::core::option::Option::None)),
        kinds: quote! {
            const KINDS: &'static [(&'static ::core::primitive::str, #krate::TagSet)] =
                &[#(#kinds),*];
        },
    })
}

/// `StreamStart` → `stream_start`, as serde's `rename_all = "snake_case"` spells it.
fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}
