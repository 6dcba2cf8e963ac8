//! The attribute's arguments: `key = ".."` or `keys = [..]`, then options.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, Ident, LitBool, LitInt, LitStr, Path, Token, bracketed};

use crate::template::Template;

mod kw {
    syn::custom_keyword!(key);
    syn::custom_keyword!(keys);
    syn::custom_keyword!(locker);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(lease);
    syn::custom_keyword!(hold_at_least);
    syn::custom_keyword!(watchdog);
    syn::custom_keyword!(guard);
    syn::custom_keyword!(mode);
    syn::custom_keyword!(permits);
}

/// Every option, as listed in errors.
const VALID: &str = "`key`, `keys`, `locker`, `wait`, `lease`, `hold_at_least`, `watchdog`, `mode`, `permits`, `guard`, `crate`";

/// What the lock is taken on.
#[derive(Debug)]
pub(crate) enum Keys {
    /// `key = ".."`: one lock.
    One(Template),
    /// `keys = [..]`: several locks, taken together deadlock-free.
    Many(Vec<Template>),
}

/// A duration literal, in whole milliseconds, and where it was written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Millis {
    pub(crate) ms: u64,
    pub(crate) span: Span,
}

/// `mode = ".."`: how the lock is taken. Without it, the lock is exclusive: whoever asks
/// first after a release wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `"read"`: the read side of a read-write lock, shared with other readers.
    Read,
    /// `"write"`: the write side of a read-write lock.
    Write,
    /// `"fair"`: exclusive, first come first served.
    Fair,
}

/// `permits = N`: a permit of a semaphore of N, and where N was written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Permits {
    pub(crate) n: u32,
    pub(crate) span: Span,
}

/// The parsed arguments of `#[distributed_lock(..)]`.
pub(crate) struct Args {
    pub(crate) keys: Keys,
    pub(crate) locker: Option<Expr>,
    pub(crate) wait: Option<Millis>,
    pub(crate) lease: Option<Millis>,
    pub(crate) hold_at_least: Option<Millis>,
    pub(crate) watchdog: Option<LitBool>,
    pub(crate) mode: Option<(Mode, Span)>,
    pub(crate) permits: Option<Permits>,
    pub(crate) guard: Option<Ident>,
    pub(crate) krate: Option<Path>,
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut keys: Option<Keys> = None;
        let mut locker = None;
        let mut wait = None;
        let mut lease = None;
        let mut hold_at_least = None;
        let mut watchdog = None;
        let mut mode = None;
        let mut permits = None;
        let mut guard = None;
        let mut krate = None;

        while !input.is_empty() {
            let lookahead = input.lookahead1();
            if lookahead.peek(kw::key) || lookahead.peek(kw::keys) {
                let many = input.peek(kw::keys);
                let span = input.span();
                match (&keys, many) {
                    (None, _) => {}
                    (Some(Keys::One(_)), false) => {
                        return Err(syn::Error::new(span, "`key` is given more than once"));
                    }
                    (Some(Keys::Many(_)), true) => {
                        return Err(syn::Error::new(span, "`keys` is given more than once"));
                    }
                    (Some(_), _) => {
                        let msg = "give either `key = \"..\"` or `keys = [..]`, not both";
                        return Err(syn::Error::new(span, msg));
                    }
                }
                let parsed = if many {
                    input.parse::<kw::keys>()?;
                    input.parse::<Token![=]>()?;
                    let content;
                    let brackets = bracketed!(content in input);
                    let lits = content.parse_terminated(<LitStr as Parse>::parse, Token![,])?;
                    if lits.is_empty() {
                        return Err(syn::Error::new(
                            brackets.span.join(),
                            "`keys = []` names no lock: give at least one key template",
                        ));
                    }
                    Keys::Many(
                        lits.iter()
                            .map(Template::from_lit)
                            .collect::<syn::Result<_>>()?,
                    )
                } else {
                    input.parse::<kw::key>()?;
                    input.parse::<Token![=]>()?;
                    Keys::One(Template::from_lit(&input.parse()?)?)
                };
                keys = Some(parsed);
            } else if lookahead.peek(kw::locker) {
                let k = input.parse::<kw::locker>()?;
                input.parse::<Token![=]>()?;
                set(&mut locker, input.parse::<Expr>()?, k.span, "locker")?;
            } else if lookahead.peek(kw::wait) {
                let k = input.parse::<kw::wait>()?;
                input.parse::<Token![=]>()?;
                set(&mut wait, duration(&input.parse()?)?, k.span, "wait")?;
            } else if lookahead.peek(kw::lease) {
                let k = input.parse::<kw::lease>()?;
                input.parse::<Token![=]>()?;
                let d = duration(&input.parse()?)?;
                if d.ms == 0 {
                    return Err(syn::Error::new(d.span, "a lease must be longer than zero"));
                }
                set(&mut lease, d, k.span, "lease")?;
            } else if lookahead.peek(kw::hold_at_least) {
                let k = input.parse::<kw::hold_at_least>()?;
                input.parse::<Token![=]>()?;
                let d = duration(&input.parse()?)?;
                set(&mut hold_at_least, d, k.span, "hold_at_least")?;
            } else if lookahead.peek(kw::watchdog) {
                let k = input.parse::<kw::watchdog>()?;
                input.parse::<Token![=]>()?;
                let value = input.parse::<LitBool>().map_err(|e| {
                    syn::Error::new(e.span(), "expected `watchdog = true` or `watchdog = false`")
                })?;
                set(&mut watchdog, value, k.span, "watchdog")?;
            } else if lookahead.peek(kw::guard) {
                let k = input.parse::<kw::guard>()?;
                input.parse::<Token![=]>()?;
                let name = input.parse::<Ident>().map_err(|e| {
                    syn::Error::new(
                        e.span(),
                        "expected a name for the guard, e.g. `guard = lock`",
                    )
                })?;
                set(&mut guard, name, k.span, "guard")?;
            } else if lookahead.peek(Token![crate]) {
                let k = input.parse::<Token![crate]>()?;
                input.parse::<Token![=]>()?;
                let lit = input.parse::<LitStr>()?;
                let path = lit.parse::<Path>().map_err(|_| {
                    syn::Error::new(
                        lit.span(),
                        "expected a path, e.g. `crate = \"::my_app::lock_core\"`",
                    )
                })?;
                set(&mut krate, path, k.span, "crate")?;
            } else if lookahead.peek(kw::mode) {
                let k = input.parse::<kw::mode>()?;
                input.parse::<Token![=]>()?;
                let lit = input.parse::<LitStr>()?;
                let parsed = match lit.value().as_str() {
                    "read" => Mode::Read,
                    "write" => Mode::Write,
                    "fair" => Mode::Fair,
                    other => {
                        return Err(syn::Error::new(
                            lit.span(),
                            format!(
                                "unknown mode {other:?}; expected \"read\", \"write\" or \"fair\""
                            ),
                        ));
                    }
                };
                set(&mut mode, (parsed, lit.span()), k.span, "mode")?;
            } else if lookahead.peek(kw::permits) {
                let k = input.parse::<kw::permits>()?;
                input.parse::<Token![=]>()?;
                let lit = input.parse::<LitInt>().map_err(|e| {
                    syn::Error::new(e.span(), "expected a number of permits, e.g. `permits = 3`")
                })?;
                let n = lit.base10_parse::<u32>().map_err(|_| {
                    syn::Error::new(
                        lit.span(),
                        "a semaphore's permits are a whole number up to 4294967295",
                    )
                })?;
                if n == 0 {
                    return Err(syn::Error::new(
                        lit.span(),
                        "`permits = 0` would admit no one: a semaphore needs at least one permit",
                    ));
                }
                let span = lit.span();
                set(&mut permits, Permits { n, span }, k.span, "permits")?;
            } else if input.peek(Ident) {
                let unknown: Ident = input.parse()?;
                return Err(syn::Error::new(
                    unknown.span(),
                    format!("unknown option `{unknown}`; valid options: {VALID}"),
                ));
            } else {
                return Err(lookahead.error());
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }

        let Some(keys) = keys else {
            return Err(syn::Error::new(
                Span::call_site(),
                "missing lock key: add `key = \"name:{arg}\"` (or `keys = [..]` for several locks)",
            ));
        };
        if let Some(permits) = permits {
            if mode.is_some() {
                return Err(syn::Error::new(
                    permits.span,
                    "`permits` takes a semaphore's permit, which has no `mode`: give one or the other",
                ));
            }
            if matches!(keys, Keys::Many(_)) {
                return Err(syn::Error::new(
                    permits.span,
                    "`permits` takes a permit of one semaphore: use `key = \"..\"`, not `keys = [..]`",
                ));
            }
        }
        Ok(Self {
            keys,
            locker,
            wait,
            lease,
            hold_at_least,
            watchdog,
            mode,
            permits,
            guard,
            krate,
        })
    }
}

/// Stores an option, or fails at its repetition.
fn set<T>(slot: &mut Option<T>, value: T, at: Span, name: &str) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(
            at,
            format!("`{name}` is given more than once"),
        ));
    }
    *slot = Some(value);
    Ok(())
}

/// Parses a duration literal such as `"250ms"`, `"5s"`, `"2m"`, `"1h"` or `"1m30s"`.
pub(crate) fn duration(lit: &LitStr) -> syn::Result<Millis> {
    let ms = parse_millis(&lit.value()).ok_or_else(|| {
        syn::Error::new(
            lit.span(),
            format!(
                "invalid duration {:?}: expected whole numbers with units ms, s, m or h, \
                 e.g. \"250ms\", \"5s\", \"2m\", \"1m30s\"",
                lit.value()
            ),
        )
    })?;
    Ok(Millis {
        ms,
        span: lit.span(),
    })
}

fn parse_millis(s: &str) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let per = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total = total.checked_add(n.checked_mul(per)?)?;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn args(tokens: proc_macro2::TokenStream) -> syn::Result<Args> {
        syn::parse2(tokens)
    }

    fn err(tokens: proc_macro2::TokenStream) -> String {
        match args(tokens) {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_millis("250ms"), Some(250));
        assert_eq!(parse_millis("5s"), Some(5_000));
        assert_eq!(parse_millis("2m"), Some(120_000));
        assert_eq!(parse_millis("1h"), Some(3_600_000));
        assert_eq!(parse_millis("1m30s"), Some(90_000));
        assert_eq!(parse_millis("0s"), Some(0));
        for bad in [
            "",
            "5",
            "s",
            "5 s",
            "1.5s",
            "5sec",
            "-1s",
            "5S",
            "99999999999999999999h",
        ] {
            assert_eq!(parse_millis(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn every_option() {
        let a = args(quote!(
            key = "balance:{id}",
            locker = self.locker,
            wait = "2s",
            lease = "10s",
            hold_at_least = "1m",
            watchdog = false,
            guard = lock,
            crate = "::my::lock_core",
        ))
        .unwrap();
        assert!(matches!(&a.keys, Keys::One(t) if t.format_string() == "balance:{}"));
        assert!(a.locker.is_some());
        assert_eq!(a.wait.unwrap().ms, 2_000);
        assert_eq!(a.lease.unwrap().ms, 10_000);
        assert_eq!(a.hold_at_least.unwrap().ms, 60_000);
        assert!(!a.watchdog.unwrap().value);
        assert_eq!(a.guard.unwrap(), "lock");
        let krate = a.krate.unwrap();
        assert_eq!(quote!(#krate).to_string(), ":: my :: lock_core");
    }

    #[test]
    fn modes_and_permits() {
        let mode = |tokens| args(tokens).unwrap().mode.map(|(mode, _)| mode);
        assert_eq!(mode(quote!(key = "a")), None);
        assert_eq!(mode(quote!(key = "a", mode = "read")), Some(Mode::Read));
        assert_eq!(mode(quote!(key = "a", mode = "write")), Some(Mode::Write));
        assert_eq!(mode(quote!(key = "a", mode = "fair")), Some(Mode::Fair));
        let a = args(quote!(key = "a", permits = 3)).unwrap();
        assert_eq!(a.permits.unwrap().n, 3);
        let a = args(quote!(keys = ["a", "b"], mode = "read")).unwrap();
        assert_eq!(a.mode.map(|(mode, _)| mode), Some(Mode::Read));
    }

    #[test]
    fn several_keys() {
        let a = args(quote!(keys = ["a:{x}", "b:{y}"])).unwrap();
        assert!(matches!(&a.keys, Keys::Many(t) if t.len() == 2));
    }

    #[test]
    fn locker_expression_ends_at_the_comma() {
        let a = args(quote!(
            key = "k",
            locker = state.lockers[0].clone(),
            wait = "1s"
        ))
        .unwrap();
        let locker = a.locker.unwrap();
        assert_eq!(
            quote!(#locker).to_string(),
            "state . lockers [0] . clone ()"
        );
    }

    #[test]
    fn errors() {
        assert!(err(quote!()).starts_with("missing lock key"));
        assert!(err(quote!(wait = "1s")).starts_with("missing lock key"));
        assert!(err(quote!(key = "a", keys = ["b"])).contains("not both"));
        assert!(err(quote!(key = "a", key = "b")).contains("`key` is given more than once"));
        assert!(
            err(quote!(key = "a", wait = "1s", wait = "2s"))
                .contains("`wait` is given more than once")
        );
        assert!(
            err(quote!(key = "a", timeout = "1s"))
                .contains("unknown option `timeout`; valid options: `key`")
        );
        assert!(err(quote!(key = "a", mode = "fifo")).contains("unknown mode \"fifo\""));
        assert!(err(quote!(key = "a", permits = 0)).contains("at least one permit"));
        assert!(err(quote!(key = "a", permits = -1)).contains("whole number"));
        assert!(err(quote!(key = "a", permits = "3")).contains("a number of permits"));
        assert!(err(quote!(key = "a", mode = "read", permits = 3)).contains("one or the other"));
        assert!(err(quote!(key = "a", permits = 3, mode = "write")).contains("one or the other"));
        assert!(err(quote!(keys = ["a", "b"], permits = 2)).contains("not `keys = [..]`"));
        assert!(
            err(quote!(key = "a", permits = 2, permits = 3))
                .contains("`permits` is given more than once")
        );
        assert!(
            err(quote!(key = "a", mode = "fair", mode = "write"))
                .contains("`mode` is given more than once")
        );
        assert!(err(quote!(key = "a", wait = "soon")).contains("invalid duration \"soon\""));
        assert!(err(quote!(key = "a", lease = "0s")).contains("longer than zero"));
        assert!(err(quote!(key = "a", watchdog = "no")).contains("watchdog = false"));
        assert!(err(quote!(key = "a", guard = "g")).contains("a name for the guard"));
        assert!(err(quote!(keys = [])).contains("names no lock"));
        assert!(err(quote!(key = "")).contains("empty key template"));
        assert!(err(quote!(key = "a", crate = "not a path")).contains("expected a path"));
    }
}
