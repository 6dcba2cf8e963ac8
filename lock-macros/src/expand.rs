//! Code generation: the fn as written, its body run under the lock.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{AttrStyle, FnArg, ItemFn, LitStr, Pat, ReturnType, Signature, Type};

use crate::attr::{Args, Keys, Mode};
use crate::template::Template;

/// The whole macro: `attr` are the arguments, `item` the annotated fn. On any error, the
/// fn is emitted unchanged beside a `compile_error!`, so the rest of the crate (and the
/// IDE) still sees it.
pub(crate) fn distributed_lock(attr: TokenStream, item: TokenStream) -> TokenStream {
    let func = match syn::parse2::<syn::Item>(item.clone()) {
        Ok(syn::Item::Fn(func)) => func,
        Ok(other) => {
            let msg = "#[distributed_lock] goes on an `async fn` with a body";
            return with_error(item, syn::Error::new_spanned(other, msg));
        }
        Err(e) => return with_error(item, e),
    };
    match syn::parse2::<Args>(attr).and_then(|args| expand(&args, &func)) {
        Ok(tokens) => tokens,
        Err(e) => with_error(item, e),
    }
}

fn with_error(item: TokenStream, error: syn::Error) -> TokenStream {
    let error = error.into_compile_error();
    quote!(#item #error)
}

/// The fn with its body wrapped, or the first problems found with it.
pub(crate) fn expand(args: &Args, func: &ItemFn) -> syn::Result<TokenStream> {
    let sig = &func.sig;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span,
            "#[distributed_lock] needs an `async fn`: the lock is held across `.await`s",
        ));
    }
    let ret = result_type(sig)?;
    check(args, sig)?;

    let krate = match &args.krate {
        Some(path) => path.to_token_stream(),
        None => quote!(::lock_core),
    };
    let private = quote!(#krate::__private);

    // `Err(E::from(lock_error))`, where a missing `From<LockError>` is reported at the
    // return type. For `E = LockError` the conversion is the identity, which clippy would
    // report at the user's return type.
    let ret_span = ret.span();
    let fail = quote_spanned! {ret_span=>
        {
            #[allow(clippy::useless_conversion)]
            let __lock_err = ::core::convert::From::from(__lock_err);
            ::core::result::Result::Err(__lock_err)
        }
    };

    let locker = match &args.locker {
        Some(expr) => quote_spanned! {expr.span()=> #private::locker(&(#expr)) },
        None => quote! {
            match #private::global() {
                ::core::result::Result::Ok(__lock_locker) => __lock_locker,
                ::core::result::Result::Err(__lock_err) => return #fail,
            }
        },
    };

    let mut opts = quote!(#private::LockOptions::new());
    if let Some(wait) = args.wait {
        let ms = wait.ms;
        opts = quote_spanned!(wait.span=> #opts.wait(#private::Duration::from_millis(#ms)));
    }
    if let Some(lease) = args.lease {
        let ms = lease.ms;
        opts = quote_spanned!(lease.span=> #opts.lease(#private::Duration::from_millis(#ms)));
    }
    if let Some(hold) = args.hold_at_least {
        let ms = hold.ms;
        opts =
            quote_spanned!(hold.span=> #opts.hold_at_least(#private::Duration::from_millis(#ms)));
    }
    if let Some(watchdog) = &args.watchdog {
        opts = quote_spanned!(watchdog.span=> #opts.watchdog(#watchdog));
    }
    match args.mode {
        Some((Mode::Fair, span)) => opts = quote_spanned!(span=> #opts.fair(true)),
        Some((Mode::Read, span)) => {
            opts = quote_spanned!(span=> #opts.kind(#private::LockKind::Read));
        }
        Some((Mode::Write, span)) => {
            opts = quote_spanned!(span=> #opts.kind(#private::LockKind::Write));
        }
        None => {}
    }
    if let Some(permits) = args.permits {
        let n = permits.n;
        opts = quote_spanned!(permits.span=>
            #opts.kind(#private::LockKind::Semaphore { permits: #n })
        );
    }

    let (outer_attrs, inner_attrs): (Vec<_>, Vec<_>) = func
        .attrs
        .iter()
        .partition(|a| matches!(a.style, AttrStyle::Outer));
    let vis = &func.vis;
    let block = &func.block;

    // The body as written, in a block whose output is the fn's return type, so that `?`
    // and `return` behave as in the fn (the never-taken `return` fixes the type).
    let body = quote_spanned! {ret_span=>
        async move {
            #[allow(
                unreachable_code,
                clippy::diverging_sub_expression,
                clippy::empty_loop,
                clippy::let_unit_value,
                clippy::needless_return
            )]
            if false {
                let __lock_ret: #ret = loop {};
                return __lock_ret;
            }
            #block
        }
    };

    // The templates as written label the lock in metrics and traces.
    let label = match &args.keys {
        Keys::One(template) => template.source.clone(),
        Keys::Many(templates) => {
            let sources: Vec<&str> = templates.iter().map(|t| t.source.as_str()).collect();
            sources.join(", ")
        }
    };
    let opts = quote!(#opts.label(#label));

    let (key_binding, guard_type, lock, with_lock, release) = match &args.keys {
        Keys::One(template) => {
            let key = key_expr(template, &private);
            (
                quote!(let __lock_key: ::std::string::String = #key;),
                quote!(#private::LockGuard),
                quote!(__lock_locker.lock_with(&__lock_key, #opts)),
                quote!(__lock_locker.with_lock_opts(&__lock_key, #opts, __lock_body)),
                quote!(#private::release(__lock_guard).await;),
            )
        }
        Keys::Many(templates) => {
            let n = templates.len();
            let keys = templates.iter().map(|t| key_expr(t, &private));
            (
                quote!(let __lock_keys: [::std::string::String; #n] = [#(#keys),*];),
                quote!(#private::MultiGuard),
                quote!(__lock_locker.lock_all(&__lock_keys, #opts)),
                quote!(__lock_locker.with_locks(&__lock_keys, #opts, __lock_body)),
                quote!(#private::release_all(__lock_guard).await;),
            )
        }
    };

    let run = match &args.guard {
        None => quote! {
            let __lock_body = #body;
            match #with_lock.await {
                ::core::result::Result::Ok(__lock_out) => __lock_out,
                ::core::result::Result::Err(__lock_err) => #fail,
            }
        },
        Some(name) => quote! {
            let __lock_guard = match #lock.await {
                ::core::result::Result::Ok(__lock_guard) => __lock_guard,
                ::core::result::Result::Err(__lock_err) => return #fail,
            };
            let __lock_out = {
                let #name: &#guard_type = &__lock_guard;
                __lock_guard.scope(#body).await
            };
            match __lock_out {
                ::core::result::Result::Ok(__lock_out) => {
                    #release
                    __lock_out
                }
                ::core::result::Result::Err(__lock_err) => {
                    // Lost: dropping the guard gives back whatever is still ours.
                    ::core::mem::drop(__lock_guard);
                    #fail
                }
            }
        },
    };

    Ok(quote! {
        #(#outer_attrs)*
        #vis #sig {
            #(#inner_attrs)*
            let __lock_locker: #private::Locker = #locker;
            #key_binding
            #run
        }
    })
}

/// The return type, which must be a `Result<T, E>` (or an alias named `Result`).
fn result_type(sig: &Signature) -> syn::Result<&Type> {
    const NEEDS: &str = "#[distributed_lock] needs a `Result<T, E>` return type, with \
                         `E: From<LockError>`, to report a lock that could not be taken";
    let ty = match &sig.output {
        ReturnType::Type(_, ty) => ty,
        ReturnType::Default => {
            let msg = format!("{NEEDS}; `{}` returns `()`", sig.ident);
            return Err(syn::Error::new(sig.paren_token.span.close(), msg));
        }
    };
    let mut inner: &Type = ty;
    while let Type::Paren(p) = inner {
        inner = &p.elem;
    }
    let is_result = match inner {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last().is_some_and(|s| {
            s.ident == "Result" && matches!(s.arguments, syn::PathArguments::AngleBracketed(_))
        }),
        _ => false,
    };
    if !is_result {
        let msg = format!("{NEEDS}; found `{}`", inner.to_token_stream());
        return Err(syn::Error::new_spanned(ty, msg));
    }
    Ok(ty)
}

/// Every placeholder names a parameter; the guard's name shadows none.
fn check(args: &Args, sig: &Signature) -> syn::Result<()> {
    let params = param_names(sig);
    let templates: Vec<&Template> = match &args.keys {
        Keys::One(t) => vec![t],
        Keys::Many(ts) => ts.iter().collect(),
    };
    let mut errors: Option<syn::Error> = None;
    let mut push = |e: syn::Error| match &mut errors {
        Some(all) => all.combine(e),
        None => errors = Some(e),
    };
    for template in templates {
        for path in template.paths() {
            let root = &path[0];
            if params.iter().any(|p| p == root) {
                continue;
            }
            let known = if params.is_empty() {
                format!("`{}` has no parameters", sig.ident)
            } else {
                let list: Vec<String> = params.iter().map(|p| format!("`{p}`")).collect();
                format!("the parameters are {}", list.join(", "))
            };
            let msg = if root == "self" {
                format!(
                    "`{{self..}}` in a key template needs a method with a `self` receiver; {known}"
                )
            } else {
                format!("unknown parameter `{root}` in key template; {known}")
            };
            push(syn::Error::new(template.span, msg));
        }
    }
    if let Some(guard) = &args.guard
        && params.iter().any(|p| guard == p)
    {
        push(syn::Error::new(
            guard.span(),
            format!(
                "the guard `{guard}` would shadow the parameter of that name: pick another name"
            ),
        ));
    }
    errors.map_or(Ok(()), Err)
}

/// The names a fn's parameters bind, `self` included.
fn param_names(sig: &Signature) -> Vec<String> {
    let mut names = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(_) => names.push("self".to_owned()),
            FnArg::Typed(pat) => bound_names(&pat.pat, &mut names),
        }
    }
    names
}

fn bound_names(pat: &Pat, out: &mut Vec<String>) {
    match pat {
        Pat::Ident(p) => {
            out.push(p.ident.to_string());
            if let Some((_, sub)) = &p.subpat {
                bound_names(sub, out);
            }
        }
        Pat::Tuple(p) => p.elems.iter().for_each(|p| bound_names(p, out)),
        Pat::TupleStruct(p) => p.elems.iter().for_each(|p| bound_names(p, out)),
        Pat::Struct(p) => p.fields.iter().for_each(|f| bound_names(&f.pat, out)),
        Pat::Slice(p) => p.elems.iter().for_each(|p| bound_names(p, out)),
        Pat::Reference(p) => bound_names(&p.pat, out),
        Pat::Paren(p) => bound_names(&p.pat, out),
        Pat::Type(p) => bound_names(&p.pat, out),
        _ => {}
    }
}

/// `::std::format!("balance:{}", ::lock_core::__private::KeySegment(&id))` for a
/// template: each value escaped, so that it cannot pass for part of another key. Spanned at
/// the template's literal, so that a placeholder whose type is not `Display` is reported
/// there.
fn key_expr(template: &Template, private: &TokenStream) -> TokenStream {
    let span = template.span;
    let fmt = LitStr::new(&template.format_string(), span);
    // The path too, or the error would span it, the whole attribute, as well.
    let segment: TokenStream = quote!(#private::KeySegment)
        .into_iter()
        .map(|mut token| {
            token.set_span(span);
            token
        })
        .collect();
    let args = template.paths().map(|path| {
        let root = Ident::new(&path[0], span);
        let fields = path[1..].iter().map(|f| member(f, span));
        quote_spanned!(span=> #segment(&#root #(.#fields)*))
    });
    quote_spanned!(span=> ::std::format!(#fmt #(, #args)*))
}

fn member(field: &str, span: Span) -> TokenStream {
    match field.parse::<u32>() {
        Ok(index) => syn::Index { index, span }.into_token_stream(),
        Err(_) => Ident::new(field, span).into_token_stream(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(attr: TokenStream, item: TokenStream) -> String {
        distributed_lock(attr, item).to_string()
    }

    fn error_of(attr: TokenStream, item: TokenStream) -> String {
        let args: Args = syn::parse2(attr).unwrap();
        let func: ItemFn = syn::parse2(item).unwrap();
        expand(&args, &func).unwrap_err().to_string()
    }

    #[test]
    fn one_key_runs_the_body_through_with_lock() {
        let out = run(
            quote!(key = "balance:{id}", wait = "5s"),
            quote!(
                /// Docs stay.
                pub(crate) async fn deposit(id: u64) -> Result<u64, AppError> {
                    Ok(id)
                }
            ),
        );
        assert!(out.starts_with("# [doc = r\" Docs stay.\"] pub (crate) async fn deposit (id : u64) -> Result < u64 , AppError >"), "{out}");
        assert!(out.contains("let __lock_locker : :: lock_core :: __private :: Locker = match :: lock_core :: __private :: global ()"), "{out}");
        assert!(
            out.contains(
                ":: std :: format ! (\"balance:{}\" , :: lock_core :: __private :: KeySegment (& id))"
            ),
            "{out}"
        );
        assert!(
            out.contains(". wait (:: lock_core :: __private :: Duration :: from_millis (5000u64))"),
            "{out}"
        );
        assert!(
            out.contains("__lock_locker . with_lock_opts (& __lock_key"),
            "{out}"
        );
        assert!(
            out.contains("let __lock_ret : Result < u64 , AppError > = loop { } ;"),
            "{out}"
        );
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn keys_locker_guard_and_crate() {
        let out = run(
            quote!(
                keys = ["a:{from}", "a:{to.0}"],
                locker = self.locker,
                guard = lock,
                crate = "my::lc"
            ),
            quote!(
                async fn transfer(&self, from: u64, to: (u64,)) -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(
            out.contains("my :: lc :: __private :: locker (& (self . locker))"),
            "{out}"
        );
        assert!(
            out.contains(
                "[:: std :: format ! (\"a:{}\" , my :: lc :: __private :: KeySegment (& from)) , \
                 :: std :: format ! (\"a:{}\" , my :: lc :: __private :: KeySegment (& to . 0))]"
            ),
            "{out}"
        );
        assert!(
            out.contains("__lock_locker . lock_all (& __lock_keys"),
            "{out}"
        );
        assert!(
            out.contains("let lock : & my :: lc :: __private :: MultiGuard = & __lock_guard ;"),
            "{out}"
        );
        assert!(
            out.contains("my :: lc :: __private :: release_all (__lock_guard) . await"),
            "{out}"
        );
    }

    #[test]
    fn self_fields_and_escaped_braces() {
        let out = run(
            quote!(key = "{{x}}:{self.account_id}"),
            quote!(
                async fn settle(&mut self) -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(
            out.contains("format ! (\"{{x}}:{}\" , :: lock_core :: __private :: KeySegment (& self . account_id))"),
            "{out}"
        );
    }

    #[test]
    fn options_chain() {
        let out = run(
            quote!(
                key = "k",
                lease = "1m30s",
                hold_at_least = "30s",
                watchdog = false,
                mode = "fair"
            ),
            quote!(
                async fn f() -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(out.contains("LockOptions :: new () . lease (:: lock_core :: __private :: Duration :: from_millis (90000u64)) . hold_at_least (:: lock_core :: __private :: Duration :: from_millis (30000u64)) . watchdog (false) . fair (true)"), "{out}");
    }

    #[test]
    fn errors_keep_the_fn() {
        let out = run(
            quote!(key = "k"),
            quote!(
                fn sync_fn() -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(
            out.starts_with("fn sync_fn () -> Result < () , E > { Ok (()) }"),
            "{out}"
        );
        assert!(
            out.contains("compile_error ! { \"#[distributed_lock] needs an `async fn`"),
            "{out}"
        );

        let out = run(
            quote!(nope = 1),
            quote!(
                async fn f() -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(out.starts_with("async fn f ()"), "{out}");
        assert!(out.contains("unknown option `nope`"), "{out}");

        let out = run(
            quote!(key = "k"),
            quote!(
                struct S;
            ),
        );
        assert!(out.contains("goes on an `async fn`"), "{out}");
    }

    #[test]
    fn return_type_must_be_a_result() {
        let f = quote!(
            async fn f(id: u64) {}
        );
        assert!(error_of(quote!(key = "{id}"), f).contains("`f` returns `()`"));
        let f = quote!(
            async fn f(id: u64) -> u64 {
                id
            }
        );
        assert!(error_of(quote!(key = "{id}"), f).contains("found `u64`"));
        let f = quote!(
            async fn f(id: u64) -> Option<u64> {
                None
            }
        );
        assert!(error_of(quote!(key = "{id}"), f).contains("found `Option < u64 >`"));
        // aliases named `Result` are fine
        let f: ItemFn = syn::parse2(quote!(
            async fn f(id: u64) -> std::io::Result<u64> {
                Ok(id)
            }
        ))
        .unwrap();
        assert!(expand(&syn::parse2(quote!(key = "{id}")).unwrap(), &f).is_ok());
    }

    #[test]
    fn placeholders_must_name_parameters() {
        let f = quote!(
            async fn f(id: u64, (a, b): (u8, u8), Point { x, .. }: Point) -> Result<(), E> {
                Ok(())
            }
        );
        let args: Args = syn::parse2(quote!(keys = ["{id}:{a}:{b}:{x}"])).unwrap();
        assert!(expand(&args, &syn::parse2(f.clone()).unwrap()).is_ok());

        let err = error_of(quote!(key = "{idd}"), f.clone());
        assert_eq!(
            err,
            "unknown parameter `idd` in key template; the parameters are `id`, `a`, `b`, `x`"
        );
        let err = error_of(quote!(key = "{self.id}"), f);
        assert!(
            err.contains("needs a method with a `self` receiver"),
            "{err}"
        );
        let err = error_of(
            quote!(key = "{id}"),
            quote!(
                async fn g() -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(err.contains("`g` has no parameters"), "{err}");
    }

    #[test]
    fn guard_must_not_shadow_a_parameter() {
        let err = error_of(
            quote!(key = "{id}", guard = id),
            quote!(
                async fn f(id: u64) -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(
            err.contains("the guard `id` would shadow the parameter"),
            "{err}"
        );
    }
}
