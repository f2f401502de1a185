//! One home per field shape. Each shape (plain, `len`, `rest`, `count`) and each layer
//! around one (`#[since]`, `optional`, `marker`, `expect`) says in one place how it is
//! read, written, measured and how small it can be; a new attribute key is one more type
//! here and its parsing in `attr`.
//!
//! A field is a stack: its presence (`#[since]` or `optional`) outside, then its marker
//! byte, then its `expect` check, then its wire shape.

use proc_macro2::{Ident, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Lifetime, Type};

use super::{condition, early_count, internal, krate, tag_literal, Scope};
use crate::ast::Field;
use crate::attr::{Count, Len, Since, Tag};

/// What generated code around one field needs: its names for errors and its lifetime.
pub struct Cx<'c> {
    pub scope: &'c Scope,
    pub name: String,
    pub lifetime: &'c Lifetime,
}

impl Cx<'_> {
    /// A decode result with the field's place added to its error, then unwrapped.
    fn placed(&self, result: TokenStream) -> TokenStream {
        let krate = krate();
        let (message, name) = (&self.scope.message, &self.name);
        if self.scope.transparent {
            quote!(#result?)
        } else {
            quote!(#krate::__private::field(#result, #message, #name)?)
        }
    }

    /// An encode result with the field's place added to its error, then unwrapped.
    fn placed_encode(&self, result: TokenStream) -> TokenStream {
        let krate = krate();
        let (message, name) = (&self.scope.message, &self.name);
        if self.scope.transparent {
            quote!(#result?;)
        } else {
            quote!(#krate::__private::encode_field(#result, #message, #name)?;)
        }
    }
}

/// A part of a field's code: the value's shape, or a layer around one.
pub trait Part {
    /// The fewest bytes it takes on the wire.
    fn min_len(&self, cx: &Cx<'_>) -> TokenStream;
    /// An expression that reads it (errors placed and propagated).
    fn read(&self, cx: &Cx<'_>) -> TokenStream;
    /// An expression that reads it as `read` does, refusing what `read` refuses but with
    /// no error to build (`Decode::decode_valid`; `None` propagated with `?` or returned).
    /// `None` here: this shape has no such read, and the container keeps the default,
    /// `decode(…).ok()`.
    fn read_valid(&self, _: &Cx<'_>) -> Option<TokenStream> {
        None
    }
    /// Statements that write the value behind `value` (a `&T` expression).
    fn write(&self, cx: &Cx<'_>, value: &TokenStream) -> TokenStream;
    /// Statements that write the tag byte `tag`, then the value, in fewer writes than the
    /// tag and `write` would take; `None` where this shape has no such write.
    fn write_after_tag(
        &self,
        _: &Cx<'_>,
        _value: &TokenStream,
        _tag: &TokenStream,
    ) -> Option<TokenStream> {
        None
    }
    /// A `usize` expression: the bytes the value behind `value` takes.
    fn len(&self, value: &TokenStream) -> TokenStream;
}

/// The stack of parts for `field`, outermost first.
pub fn parts<'f>(field: &'f Field<'_>) -> Box<dyn Part + 'f> {
    let attrs = &field.attrs;
    let ty = field.wire_ty();
    let mut part: Box<dyn Part + 'f> = if let Some(len) = &attrs.len {
        Box::new(LenPrefixed { len })
    } else if attrs.rest.is_some() {
        Box::new(Rest)
    } else if let Some(count) = &attrs.count {
        Box::new(Counted {
            count,
            field,
            parts: ty,
        })
    } else {
        Box::new(Plain { ty })
    };
    if let Some((expected, _)) = &attrs.expect {
        part = Box::new(Expect {
            expected,
            inner: part,
        });
    }
    if let Some(marker) = &attrs.marker {
        part = Box::new(Marker {
            marker,
            inner: part,
        });
    }
    if let Some(since) = &attrs.since {
        part = Box::new(Gated { since, inner: part });
    } else if attrs.optional.is_some() {
        part = Box::new(Optional { ty, inner: part });
    }
    part
}

/// A value of a type that decodes and encodes itself.
struct Plain<'f> {
    ty: &'f Type,
}

impl Part for Plain<'_> {
    fn min_len(&self, cx: &Cx<'_>) -> TokenStream {
        let (krate, ty, lifetime) = (krate(), self.ty, cx.lifetime);
        quote!(<#ty as #krate::Decode<#lifetime>>::MIN_WIRE_LEN)
    }

    fn read(&self, cx: &Cx<'_>) -> TokenStream {
        let (krate, ty, lifetime) = (krate(), self.ty, cx.lifetime);
        let (r, ctx) = (internal("r"), internal("ctx"));
        cx.placed(quote_spanned!(ty.span()=> <#ty as #krate::Decode<#lifetime>>::decode(#r, #ctx)))
    }

    fn read_valid(&self, cx: &Cx<'_>) -> Option<TokenStream> {
        let (krate, ty, lifetime) = (krate(), self.ty, cx.lifetime);
        let (r, ctx) = (internal("r"), internal("ctx"));
        Some(
            quote_spanned!(ty.span()=> <#ty as #krate::Decode<#lifetime>>::decode_valid(#r, #ctx)?),
        )
    }

    fn write(&self, cx: &Cx<'_>, value: &TokenStream) -> TokenStream {
        let krate = krate();
        let (w, ctx) = (internal("w"), internal("ctx"));
        // Spanned at the field's type: a type without `Encode` is reported there.
        let ty = self.ty;
        cx.placed_encode(
            quote_spanned!(ty.span()=> <#ty as #krate::Encode>::encode(#value, #w, #ctx)),
        )
    }

    fn len(&self, value: &TokenStream) -> TokenStream {
        let krate = krate();
        let ctx = internal("ctx");
        let ty = self.ty;
        quote_spanned!(ty.span()=> <#ty as #krate::Encode>::encoded_len(#value, #ctx))
    }
}

/// `AsRef<[u8]>` of the value behind `value`.
fn bytes_of(value: &TokenStream) -> TokenStream {
    quote!(::core::convert::AsRef::<[::core::primitive::u8]>::as_ref(#value))
}

/// `#[codec(len = C)]`: a length of type `C`, then the bytes.
struct LenPrefixed<'f> {
    len: &'f Len,
}

impl Part for LenPrefixed<'_> {
    fn min_len(&self, _: &Cx<'_>) -> TokenStream {
        let prefix = &self.len.prefix;
        quote!(::core::mem::size_of::<#prefix>())
    }

    fn read(&self, cx: &Cx<'_>) -> TokenStream {
        let krate = krate();
        let (r, ctx) = (internal("r"), internal("ctx"));
        let prefix = &self.len.prefix;
        let bytes = cx.placed(quote!(#krate::__private::read_len_bytes::<#prefix>(#r, #ctx)));
        quote!(::core::convert::From::from(#bytes))
    }

    fn read_valid(&self, _: &Cx<'_>) -> Option<TokenStream> {
        let krate = krate();
        let (r, ctx) = (internal("r"), internal("ctx"));
        let prefix = &self.len.prefix;
        Some(quote! {
            ::core::convert::From::from(
                #krate::__private::read_len_bytes_valid::<#prefix>(#r, #ctx)?
            )
        })
    }

    fn write(&self, cx: &Cx<'_>, value: &TokenStream) -> TokenStream {
        let krate = krate();
        let (w, ctx) = (internal("w"), internal("ctx"));
        let (prefix, bytes) = (&self.len.prefix, bytes_of(value));
        cx.placed_encode(quote!(#krate::__private::write_len_bytes::<#prefix>(#w, #ctx, #bytes)))
    }

    fn write_after_tag(
        &self,
        cx: &Cx<'_>,
        value: &TokenStream,
        tag: &TokenStream,
    ) -> Option<TokenStream> {
        let krate = krate();
        let w = internal("w");
        let (prefix, bytes) = (&self.len.prefix, bytes_of(value));
        Some(cx.placed_encode(quote! {
            #krate::__private::write_tag_len_bytes::<#prefix>(#w, #tag, #bytes)
        }))
    }

    fn len(&self, value: &TokenStream) -> TokenStream {
        let (prefix, bytes) = (&self.len.prefix, bytes_of(value));
        quote!((::core::mem::size_of::<#prefix>() + <[::core::primitive::u8]>::len(#bytes)))
    }
}

/// `#[codec(rest)]`: every byte left in the message.
struct Rest;

impl Part for Rest {
    fn min_len(&self, _: &Cx<'_>) -> TokenStream {
        quote!(0)
    }

    fn read(&self, cx: &Cx<'_>) -> TokenStream {
        let krate = krate();
        let r = internal("r");
        let bytes = cx.placed(quote!(#krate::__private::read_rest(#r)));
        quote!(::core::convert::From::from(#bytes))
    }

    fn read_valid(&self, _: &Cx<'_>) -> Option<TokenStream> {
        let r = internal("r");
        Some(quote!(::core::convert::From::from(#r.read_rest())))
    }

    fn write(&self, cx: &Cx<'_>, value: &TokenStream) -> TokenStream {
        let krate = krate();
        let w = internal("w");
        let bytes = bytes_of(value);
        cx.placed_encode(quote!(#krate::__private::write_rest(#w, #bytes)))
    }

    fn len(&self, value: &TokenStream) -> TokenStream {
        let bytes = bytes_of(value);
        quote!(<[::core::primitive::u8]>::len(#bytes))
    }
}

/// `#[codec(count = C)]`: a `Vec` of elements after their count, or, with
/// `count_before = f`, with the count before an earlier field `f` (which the enclosing
/// struct's code reads and writes there).
struct Counted<'f> {
    count: &'f Count,
    field: &'f Field<'f>,
    /// The field's type: a `Vec` or a `Seq` of the elements.
    parts: &'f Type,
}

impl Part for Counted<'_> {
    fn min_len(&self, cx: &Cx<'_>) -> TokenStream {
        // The count's bytes are on the wire even when it comes before another field.
        let (krate, prefix, lifetime) = (krate(), &self.count.prefix, cx.lifetime);
        quote!(<#prefix as #krate::Decode<#lifetime>>::MIN_WIRE_LEN)
    }

    fn read(&self, cx: &Cx<'_>) -> TokenStream {
        let krate = krate();
        let (r, ctx) = (internal("r"), internal("ctx"));
        let parts = self.parts;
        cx.placed(match &self.count.before {
            None => {
                let prefix = &self.count.prefix;
                quote!(#krate::__private::read_counted::<#prefix, #parts>(#r, #ctx))
            }
            Some(_) => {
                let local = early_count(self.field);
                quote!(#krate::__private::read_elements::<#parts>(#r, #ctx, #local))
            }
        })
    }

    fn write(&self, cx: &Cx<'_>, value: &TokenStream) -> TokenStream {
        let krate = krate();
        let (w, ctx) = (internal("w"), internal("ctx"));
        cx.placed_encode(match &self.count.before {
            None => {
                let prefix = &self.count.prefix;
                quote!(#krate::__private::write_counted::<#prefix, _>(#w, #ctx, #value))
            }
            // The count went out before an earlier field.
            Some(_) => quote!(#krate::__private::write_elements(#w, #ctx, #value)),
        })
    }

    fn len(&self, value: &TokenStream) -> TokenStream {
        let krate = krate();
        let ctx = internal("ctx");
        let prefix = &self.count.prefix;
        quote! {
            (::core::mem::size_of::<#prefix>() + #krate::__private::elements_len(#ctx, #value))
        }
    }
}

/// The count of a `count_before` field, read and written before the field it names.
pub fn early_count_read(counted: &Field<'_>, cx: &Cx<'_>) -> TokenStream {
    let krate = krate();
    let (r, ctx) = (internal("r"), internal("ctx"));
    let count = counted
        .attrs
        .count
        .as_ref()
        .expect("a count_before field has a count");
    let prefix = &count.prefix;
    let local = early_count(counted);
    let (message, name) = (&cx.scope.message, counted.name());
    quote! {
        let #local = #krate::__private::field(
            #krate::__private::read_count::<#prefix>(#r, #ctx),
            #message,
            #name,
        )?;
    }
}

/// Writes the count of `elements` (a `count_before` field's value) before the field it
/// names.
pub fn early_count_write(counted: &Field<'_>, elements: &TokenStream, cx: &Cx<'_>) -> TokenStream {
    let krate = krate();
    let (w, ctx) = (internal("w"), internal("ctx"));
    let count = counted
        .attrs
        .count
        .as_ref()
        .expect("a count_before field has a count");
    let prefix = &count.prefix;
    let (message, name) = (&cx.scope.message, counted.name());
    quote! {
        #krate::__private::encode_field(
            #krate::__private::write_count::<#prefix>(
                #w,
                #ctx,
                #krate::__private::elements_count(#elements),
            ),
            #message,
            #name,
        )?;
    }
}

/// `#[codec(expect = N)]`: a value that must always be `N` (flags PostgreSQL leaves
/// unused), checked both ways.
struct Expect<'f> {
    expected: &'f syn::LitInt,
    inner: Box<dyn Part + 'f>,
}

impl Part for Expect<'_> {
    fn min_len(&self, cx: &Cx<'_>) -> TokenStream {
        self.inner.min_len(cx)
    }

    fn read(&self, cx: &Cx<'_>) -> TokenStream {
        let krate = krate();
        let (r, at, value) = (internal("r"), internal("at"), internal("value"));
        let (expected, description) = (self.expected, self.expected.base10_digits());
        let inner = self.inner.read(cx);
        let checked = cx.placed(quote! {
            #krate::__private::expect_value(
                ::core::result::Result::Ok(#value),
                #expected,
                #description,
                #at,
            )
        });
        quote!({
            let #at = #r.position();
            let #value = #inner;
            #checked
        })
    }

    fn read_valid(&self, cx: &Cx<'_>) -> Option<TokenStream> {
        let (krate, expected) = (krate(), self.expected);
        let inner = self.inner.read_valid(cx)?;
        Some(quote!(#krate::__private::expect_value_valid(#inner, #expected)?))
    }

    fn write(&self, cx: &Cx<'_>, value: &TokenStream) -> TokenStream {
        let krate = krate();
        let (expected, description) = (self.expected, self.expected.base10_digits());
        let check = cx.placed_encode(quote! {
            #krate::__private::check_value(*#value, #expected, #description)
        });
        let write = self.inner.write(cx, value);
        quote!(#check #write)
    }

    fn len(&self, value: &TokenStream) -> TokenStream {
        self.inner.len(value)
    }
}

/// `#[codec(marker = b'N')]`: a constant byte right before the value.
struct Marker<'f> {
    marker: &'f Tag,
    inner: Box<dyn Part + 'f>,
}

impl Part for Marker<'_> {
    fn min_len(&self, cx: &Cx<'_>) -> TokenStream {
        let inner = self.inner.min_len(cx);
        quote!((1 + #inner))
    }

    fn read(&self, cx: &Cx<'_>) -> TokenStream {
        let krate = krate();
        let r = internal("r");
        let byte = tag_literal(self.marker.byte);
        let (message, name) = (&cx.scope.message, &cx.name);
        let inner = self.inner.read(cx);
        quote!({
            #krate::__private::expect_byte(#r, #byte, #message, #name)?;
            #inner
        })
    }

    fn read_valid(&self, cx: &Cx<'_>) -> Option<TokenStream> {
        let (krate, r) = (krate(), internal("r"));
        let byte = tag_literal(self.marker.byte);
        let inner = self.inner.read_valid(cx)?;
        Some(quote!({
            #krate::__private::expect_byte_valid(#r, #byte)?;
            #inner
        }))
    }

    fn write(&self, cx: &Cx<'_>, value: &TokenStream) -> TokenStream {
        let w = internal("w");
        let byte = tag_literal(self.marker.byte);
        let write = self.inner.write(cx, value);
        quote!(#w.write_u8(#byte); #write)
    }

    fn len(&self, value: &TokenStream) -> TokenStream {
        let inner = self.inner.len(value);
        quote!((1 + #inner))
    }
}

/// The value inside an `Option`, for the layers that make a field optional.
fn inner_value() -> Ident {
    internal("value")
}

/// `#[since(version = N, when = "…")]`: an `Option` on the wire only from protocol `N`
/// on and when the condition holds; encoding a value the context cannot carry is an error.
struct Gated<'f> {
    since: &'f Since,
    inner: Box<dyn Part + 'f>,
}

impl Part for Gated<'_> {
    fn min_len(&self, _: &Cx<'_>) -> TokenStream {
        quote!(0)
    }

    fn read(&self, cx: &Cx<'_>) -> TokenStream {
        let (present, _) = condition(self.since);
        some_if(&present, &self.inner.read(cx))
    }

    fn read_valid(&self, cx: &Cx<'_>) -> Option<TokenStream> {
        let (present, _) = condition(self.since);
        Some(some_if(&present, &self.inner.read_valid(cx)?))
    }

    fn write(&self, cx: &Cx<'_>, value: &TokenStream) -> TokenStream {
        let krate = krate();
        let ctx = internal("ctx");
        let (present, present_when) = condition(self.since);
        let (message, name) = (&cx.scope.message, &cx.name);
        let inner_value = inner_value();
        let write = self.inner.write(cx, &quote!(#inner_value));
        quote! {
            #krate::__private::check_gated(
                ::core::option::Option::is_some(#value),
                #present,
                #present_when,
                #ctx,
                #message,
                #name,
            )?;
            if let ::core::option::Option::Some(#inner_value) = #value {
                #write
            }
        }
    }

    fn len(&self, value: &TokenStream) -> TokenStream {
        optional_len(&*self.inner, value)
    }
}

/// `#[codec(optional)]`: an `Option<T>` that is there when the next byte is one of `T`'s
/// tags.
struct Optional<'f> {
    ty: &'f Type,
    inner: Box<dyn Part + 'f>,
}

impl Part for Optional<'_> {
    fn min_len(&self, _: &Cx<'_>) -> TokenStream {
        quote!(0)
    }

    fn read(&self, cx: &Cx<'_>) -> TokenStream {
        some_if(&self.present(), &self.inner.read(cx))
    }

    fn read_valid(&self, cx: &Cx<'_>) -> Option<TokenStream> {
        Some(some_if(&self.present(), &self.inner.read_valid(cx)?))
    }

    fn write(&self, cx: &Cx<'_>, value: &TokenStream) -> TokenStream {
        let inner_value = inner_value();
        let write = self.inner.write(cx, &quote!(#inner_value));
        quote! {
            if let ::core::option::Option::Some(#inner_value) = #value {
                #write
            }
        }
    }

    fn len(&self, value: &TokenStream) -> TokenStream {
        optional_len(&*self.inner, value)
    }
}

impl Optional<'_> {
    /// Whether the next byte starts a value: one of the type's tags.
    fn present(&self) -> TokenStream {
        let krate = krate();
        let (r, ty) = (internal("r"), self.ty);
        quote!(#krate::__private::next_tag_in(#r, <#ty as #krate::Tagged>::TAGS))
    }
}

/// `Some(read)` when `present` holds, else `None`: an optional part's read.
fn some_if(present: &TokenStream, read: &TokenStream) -> TokenStream {
    quote! {
        if #present {
            ::core::option::Option::Some(#read)
        } else {
            ::core::option::Option::None
        }
    }
}

/// The length of an `Option`: the inner value's, or nothing.
fn optional_len(inner: &dyn Part, value: &TokenStream) -> TokenStream {
    let inner_value = inner_value();
    let len = inner.len(&quote!(#inner_value));
    quote! {
        match #value {
            ::core::option::Option::Some(#inner_value) => #len,
            ::core::option::Option::None => 0,
        }
    }
}
