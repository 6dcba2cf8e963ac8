//! Where a request's lock name comes from: key templates, the [`KeyExtractor`] trait, and
//! the path parameters it can read.

use std::fmt::{self, Write as _};
use std::str::FromStr;
use std::sync::Arc;

use axum::extract::RawPathParams;
use http::HeaderName;
use http::request::Parts;
use lock_core::KeySegment;

use crate::rejection::LockRejection;

/// Builds the lock name for a request, or decides that the request takes no lock.
///
/// The layer calls it once per request whose method locks, after routing and before the
/// handler. It is synchronous and only sees the request head: the body is never read.
///
/// - `Ok(Some(key))`: take the lock `key` (checked by lock-core before any I/O; a key it
///   refuses is answered with `400 Bad Request`).
/// - `Ok(None)`: run the request without a lock.
/// - `Err(rejection)`: answer with the rejection (usually
///   [`LockRejection::missing`] or [`LockRejection::invalid`], both `400`).
///
/// The route's path parameters are readable with [`PathParams::of`]. Ready-made
/// extractors: [`KeyTemplate`] (what [`LockLayer::new`](crate::LockLayer::new) uses) and
/// [`key_fn`] for a closure. Write each value from the request through
/// [`lock_core::KeySegment`], as templates do, so that a value holding a `:` cannot pass
/// for part of another key.
///
/// ```
/// use http::request::Parts;
/// use lock_axum::{KeyExtractor, LockRejection, PathParams};
/// use lock_core::KeySegment;
///
/// /// Locks per tenant and account; admins are not serialized.
/// #[derive(Debug)]
/// struct TenantAccount;
///
/// impl KeyExtractor for TenantAccount {
///     fn extract(&self, parts: &Parts) -> Result<Option<String>, LockRejection> {
///         if parts.headers.contains_key("x-admin") {
///             return Ok(None);
///         }
///         let tenant = parts
///             .headers
///             .get("x-tenant")
///             .and_then(|v| v.to_str().ok())
///             .ok_or_else(|| LockRejection::missing("header `x-tenant`"))?;
///         let id = PathParams::of(parts)
///             .get("id")
///             .ok_or_else(|| LockRejection::missing("path parameter `id`"))?;
///         Ok(Some(format!("{}:balance:{}", KeySegment(tenant), KeySegment(id))))
///     }
/// }
/// ```
pub trait KeyExtractor: fmt::Debug + Send + Sync + 'static {
    /// The lock name for this request, `None` for no lock, or why the request is refused.
    fn extract(&self, parts: &Parts) -> Result<Option<String>, LockRejection>;
}

/// The route's path parameters, percent-decoded, as a [`KeyExtractor`] sees them.
///
/// axum stores the parameters of the matched route (and of every router it is nested in)
/// in the request extensions when it routes the request. The layer reads them with
/// [`axum::extract::RawPathParams`] and, for the duration of the
/// [`KeyExtractor::extract`] call only, puts this type in the request extensions, so a
/// synchronous extractor can read them with [`PathParams::of`].
#[derive(Debug, Clone, Default)]
pub struct PathParams {
    params: Vec<(Arc<str>, Arc<str>)>,
}

static NO_PATH_PARAMS: PathParams = PathParams { params: Vec::new() };

impl PathParams {
    /// The path parameters of the request whose head is `parts`; empty when there are
    /// none (or when called outside [`KeyExtractor::extract`]).
    pub fn of(parts: &Parts) -> &PathParams {
        parts
            .extensions
            .get::<PathParams>()
            .unwrap_or(&NO_PATH_PARAMS)
    }

    /// The value of the parameter `name` (as spelled in the route: `id` for `{id}` and for
    /// `{*id}`).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| &**k == name)
            .map(|(_, v)| &**v)
    }

    /// Every parameter as `(name, value)`, outermost router first.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.params.iter().map(|(k, v)| (&**k, &**v))
    }

    /// How many parameters there are.
    pub fn len(&self) -> usize {
        self.params.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.params.is_empty()
    }

    pub(crate) fn from_raw(raw: &RawPathParams) -> Self {
        PathParams {
            params: raw.iter().map(|(k, v)| (k.into(), v.into())).collect(),
        }
    }
}

/// A malformed key template: where and why.
///
/// ```
/// let err = lock_axum::KeyTemplate::parse("balance:{id").unwrap_err();
/// assert_eq!(err.position(), 8);
/// assert_eq!(
///     err.to_string(),
///     "invalid lock key template \"balance:{id\" at byte 8: `{` is never closed (write `{{` for a literal brace)"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid lock key template {template:?} at byte {position}: {reason}")]
pub struct TemplateError {
    template: String,
    position: usize,
    reason: String,
}

impl TemplateError {
    fn new(template: &str, position: usize, reason: impl Into<String>) -> Self {
        TemplateError {
            template: template.to_owned(),
            position,
            reason: reason.into(),
        }
    }

    /// The template as given.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// The byte offset in the template where the problem is.
    pub fn position(&self) -> usize {
        self.position
    }

    /// What is wrong, without the template.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Path(String),
    Query(String),
    Header(HeaderName),
}

/// A lock name built from the request: literal text with `{..}` placeholders.
///
/// | placeholder     | value                                                        |
/// |-----------------|--------------------------------------------------------------|
/// | `{name}`        | the path parameter `name` of the matched route (`/{name}` or `/{*name}`) |
/// | `{query.name}`  | the first `name=` pair of the query string, form-decoded     |
/// | `{header.name}` | the header `name` (case-insensitive); it must appear once    |
///
/// `{{` and `}}` stand for literal braces. Each placeholder must be a whole `:`-separated
/// segment of the template (`balance:{id}`, `{header.x-tenant}:doc:{id}`; not
/// `balance-{id}` or `{a}{b}`), and the literal text may not hold a `%`, which is reserved
/// for escaped values. The template is parsed once, when the layer is built.
///
/// Values are used percent-decoded, as the handler sees them, and are checked, never
/// trusted: a placeholder with no value (or an empty one) in a request is answered with
/// `400` ([`LockRejection::MissingKeyMaterial`]), and so is a value holding a control
/// character or a brace ([`LockRejection::InvalidKeyMaterial`]). A value is then written
/// escaped, `%` as `%25` and `:` as `%3A` ([`lock_core::KeySegment`]), so that no request
/// can forge another key's name or Redis hash tag: `balance:{id}` with the id `1:2` locks
/// `balance:1%3A2`, not the key of `balance:{a}:{b}` with 1 and 2. A value without those
/// characters is written as it is. The complete name then goes through lock-core's key
/// validation (length, characters) before any I/O.
///
/// ```
/// use lock_axum::KeyTemplate;
///
/// let template: KeyTemplate = "balance:{header.x-tenant}:{id}".parse().unwrap();
/// assert_eq!(template.as_str(), "balance:{header.x-tenant}:{id}");
/// assert!(KeyTemplate::parse("balance:{}").is_err());
/// assert!(KeyTemplate::parse("balance:{cookie.sid}").is_err());
///
/// let err = KeyTemplate::parse("balance-{id}").unwrap_err();
/// assert_eq!(err.position(), 8);
/// assert!(err.reason().starts_with("`{id}` follows `-`: a placeholder must be a whole"));
/// assert_eq!(
///     KeyTemplate::parse("50%:{id}").unwrap_err().reason(),
///     "`%` is reserved for escaped values"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    source: String,
    segments: Vec<Segment>,
}

impl KeyTemplate {
    /// Parses a template, saying where and why it is malformed.
    pub fn parse(template: &str) -> Result<KeyTemplate, TemplateError> {
        if template.is_empty() {
            return Err(TemplateError::new(template, 0, "the template is empty"));
        }
        let mut segments = Vec::new();
        let mut literal = String::new();
        let mut chars = template.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            match c {
                '{' if chars.peek().map(|&(_, c)| c) == Some('{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek().map(|&(_, c)| c) == Some('}') => {
                    chars.next();
                    literal.push('}');
                }
                '}' => {
                    return Err(TemplateError::new(
                        template,
                        i,
                        "unmatched `}` (write `}}` for a literal brace)",
                    ));
                }
                '{' => {
                    let start = i + 1;
                    let end = loop {
                        match chars.next() {
                            Some((j, '}')) => break j,
                            Some((j, '{')) => {
                                return Err(TemplateError::new(
                                    template,
                                    j,
                                    "`{` inside a placeholder",
                                ));
                            }
                            Some(_) => {}
                            None => {
                                return Err(TemplateError::new(
                                    template,
                                    i,
                                    "`{` is never closed (write `{{` for a literal brace)",
                                ));
                            }
                        }
                    };
                    let segment = parse_placeholder(&template[start..end])
                        .map_err(|reason| TemplateError::new(template, start, reason))?;
                    let written = &template[i..=end];
                    if let Some(c) = literal.chars().next_back().filter(|&c| c != ':') {
                        return Err(TemplateError::new(
                            template,
                            i,
                            format!("`{written}` follows `{c}`: {WHOLE_SEGMENT}"),
                        ));
                    }
                    if let Some(&(j, c)) = chars.peek().filter(|&&(_, c)| c != ':') {
                        return Err(TemplateError::new(
                            template,
                            j,
                            format!("`{written}` is followed by `{c}`: {WHOLE_SEGMENT}"),
                        ));
                    }
                    if !literal.is_empty() {
                        segments.push(Segment::Literal(std::mem::take(&mut literal)));
                    }
                    segments.push(segment);
                }
                '%' => {
                    return Err(TemplateError::new(
                        template,
                        i,
                        "`%` is reserved for escaped values",
                    ));
                }
                c if c.is_control() => {
                    return Err(TemplateError::new(
                        template,
                        i,
                        "control characters cannot be part of a lock name",
                    ));
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            segments.push(Segment::Literal(literal));
        }
        Ok(KeyTemplate {
            source: template.to_owned(),
            segments,
        })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

/// Why a placeholder must be a whole segment, for the errors that say it is not.
const WHOLE_SEGMENT: &str = "a placeholder must be a whole `:`-separated segment, \
                             so that no value can pass for part of another key";

fn parse_placeholder(p: &str) -> Result<Segment, String> {
    if p.is_empty() {
        return Err("empty placeholder `{}`".into());
    }
    if p.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("placeholder `{{{p}}}` contains whitespace"));
    }
    match p.split_once('.') {
        Some(("query", name)) if !name.is_empty() => Ok(Segment::Query(name.to_owned())),
        Some(("header", name)) if !name.is_empty() => HeaderName::from_str(name)
            .map(Segment::Header)
            .map_err(|_| format!("`{name}` is not a valid header name")),
        Some((source @ ("query" | "header"), _)) => {
            Err(format!("`{{{source}.}}` needs a name after the dot"))
        }
        Some((source, _)) => Err(format!(
            "unknown placeholder `{{{p}}}`: `{source}.` is not a source; \
             expected `{{name}}` (a path parameter), `{{query.name}}` or `{{header.name}}`"
        )),
        None if p.starts_with('*') => Err(format!(
            "write the wildcard parameter `{p}` without `*`: `{{{}}}`",
            &p[1..]
        )),
        None if p.contains('/') => Err(format!("`{p}` cannot be a path parameter name")),
        None => Ok(Segment::Path(p.to_owned())),
    }
}

impl FromStr for KeyTemplate {
    type Err = TemplateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KeyTemplate::parse(s)
    }
}

impl fmt::Display for KeyTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl KeyExtractor for KeyTemplate {
    fn extract(&self, parts: &Parts) -> Result<Option<String>, LockRejection> {
        let mut key = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Literal(text) => key.push_str(text),
                Segment::Path(name) => {
                    let value = PathParams::of(parts).get(name).ok_or_else(|| {
                        LockRejection::missing(format!("path parameter `{name}`"))
                    })?;
                    push_value(&mut key, value, || format!("path parameter `{name}`"))?;
                }
                Segment::Query(name) => {
                    let value = parts.uri.query().and_then(|q| {
                        form_urlencoded::parse(q.as_bytes())
                            .find(|(k, _)| k == name)
                            .map(|(_, v)| v)
                    });
                    let value = value.ok_or_else(|| {
                        LockRejection::missing(format!("query parameter `{name}`"))
                    })?;
                    push_value(&mut key, &value, || format!("query parameter `{name}`"))?;
                }
                Segment::Header(name) => {
                    let what = || format!("header `{name}`");
                    let mut values = parts.headers.get_all(name).iter();
                    let value = values
                        .next()
                        .ok_or_else(|| LockRejection::missing(what()))?;
                    if values.next().is_some() {
                        return Err(LockRejection::invalid(what(), "appears more than once"));
                    }
                    let value = value
                        .to_str()
                        .map_err(|_| LockRejection::invalid(what(), "is not visible ASCII"))?;
                    push_value(&mut key, value, what)?;
                }
            }
        }
        Ok(Some(key))
    }
}

/// Appends one request-supplied value to the key after checking it, escaped as a
/// [`KeySegment`].
fn push_value(
    key: &mut String,
    value: &str,
    what: impl FnOnce() -> String,
) -> Result<(), LockRejection> {
    if value.is_empty() {
        return Err(LockRejection::missing(what()));
    }
    if value.chars().any(char::is_control) {
        return Err(LockRejection::invalid(
            what(),
            "contains a control character",
        ));
    }
    if value.contains(['{', '}']) {
        return Err(LockRejection::invalid(what(), "contains a brace"));
    }
    // writing to a String cannot fail
    let _ = write!(key, "{}", KeySegment(value));
    Ok(())
}

/// A [`KeyExtractor`] made from a closure; see [`key_fn`].
#[derive(Clone)]
pub struct KeyFn<F> {
    f: F,
}

impl<F> fmt::Debug for KeyFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyFn").finish_non_exhaustive()
    }
}

/// Turns a closure over the request head into a [`KeyExtractor`].
///
/// ```
/// use http::request::Parts;
/// use lock_axum::{LockLayer, PathParams, key_fn};
/// use lock_core::{KeySegment, Locker};
///
/// // one lock per (user, document); anonymous requests are not locked
/// let extractor = key_fn(|parts: &Parts| {
///     let Some(user) = parts.headers.get("x-user").and_then(|v| v.to_str().ok()) else {
///         return Ok(None);
///     };
///     let doc = PathParams::of(parts).get("doc");
///     Ok(doc.map(|doc| format!("doc:{}:{}", KeySegment(doc), KeySegment(user))))
/// });
/// let layer = LockLayer::with_extractor(Locker::in_memory(), extractor);
/// # let _ = layer;
/// ```
pub fn key_fn<F>(f: F) -> KeyFn<F>
where
    F: Fn(&Parts) -> Result<Option<String>, LockRejection> + Send + Sync + 'static,
{
    KeyFn { f }
}

impl<F> KeyExtractor for KeyFn<F>
where
    F: Fn(&Parts) -> Result<Option<String>, LockRejection> + Send + Sync + 'static,
{
    fn extract(&self, parts: &Parts) -> Result<Option<String>, LockRejection> {
        (self.f)(parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;
    use proptest::prelude::*;

    fn parts(uri: &str, headers: &[(&str, &str)], params: &[(&str, &str)]) -> Parts {
        let mut builder = Request::builder().uri(uri);
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        let (mut parts, ()) = builder.body(()).unwrap().into_parts();
        parts.extensions.insert(PathParams {
            params: params
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
        });
        parts
    }

    fn key(template: &str, parts: &Parts) -> Result<Option<String>, LockRejection> {
        KeyTemplate::parse(template).unwrap().extract(parts)
    }

    #[test]
    fn parses_placeholders_and_escapes() {
        let t = KeyTemplate::parse("a{{b}}:{id}:{query.q}:{header.X-Tenant}").unwrap();
        assert_eq!(
            t.segments,
            vec![
                Segment::Literal("a{b}:".into()),
                Segment::Path("id".into()),
                Segment::Literal(":".into()),
                Segment::Query("q".into()),
                Segment::Literal(":".into()),
                Segment::Header(HeaderName::from_static("x-tenant")),
            ]
        );
        assert_eq!(t.to_string(), "a{{b}}:{id}:{query.q}:{header.X-Tenant}");
        assert_eq!(
            KeyTemplate::parse("global").unwrap().segments,
            vec![Segment::Literal("global".into())]
        );
    }

    #[test]
    fn malformed_templates_say_where_and_why() {
        let cases = [
            ("", 0, "empty"),
            ("a:{id", 2, "never closed"),
            ("a:id}", 4, "unmatched `}`"),
            ("a:{}", 3, "empty placeholder"),
            ("a:{i{d}", 4, "inside a placeholder"),
            ("a:{cookie.sid}", 3, "unknown placeholder"),
            ("a:{query.}", 3, "needs a name"),
            ("a:{header.bad name}", 3, "whitespace"),
            ("a:{header.bad:name}", 3, "not a valid header name"),
            ("a:{*rest}", 3, "without `*`"),
            ("a:\n", 2, "control characters"),
            (
                "balance-{id}",
                8,
                "`{id}` follows `-`: a placeholder must be a whole",
            ),
            ("x{a}:y", 1, "`{a}` follows `x`"),
            ("{a}{b}", 3, "`{a}` is followed by `{`"),
            ("{query.q}x", 9, "`{query.q}` is followed by `x`"),
            ("{{{id}", 2, "`{id}` follows `{`"),
            ("{id}}}", 4, "`{id}` is followed by `}`"),
            ("50%:{id}", 2, "`%` is reserved for escaped values"),
            ("a:{id}:%3A", 7, "`%` is reserved"),
        ];
        for (template, position, reason) in cases {
            let err = KeyTemplate::parse(template).unwrap_err();
            assert_eq!(err.position(), position, "{template:?}: {err}");
            assert!(err.reason().contains(reason), "{template:?}: {err}");
            assert_eq!(err.template(), template);
        }
    }

    #[test]
    fn extracts_from_path_query_and_header() {
        let p = parts(
            "/accounts/7?x=1&q=a%20b+c&q=second",
            &[("x-tenant", "acme")],
            &[("id", "7")],
        );
        assert_eq!(
            key("bal:{header.x-tenant}:{id}:{query.q}", &p).unwrap(),
            Some("bal:acme:7:a b c".into())
        );
    }

    #[test]
    fn missing_and_empty_values_are_missing() {
        let p = parts("/a?q=&other=1", &[("x-empty", "")], &[]);
        for (template, what) in [
            ("{id}", "path parameter `id`"),
            ("{query.q}", "query parameter `q`"),
            ("{query.absent}", "query parameter `absent`"),
            ("{header.x-tenant}", "header `x-tenant`"),
            ("{header.x-empty}", "header `x-empty`"),
        ] {
            match key(template, &p) {
                Err(LockRejection::MissingKeyMaterial { what: w }) => assert_eq!(w, what),
                other => panic!("{template}: {other:?}"),
            }
        }
    }

    #[test]
    fn forging_values_are_refused() {
        let p = parts(
            "/a?q=x%7Dy&c=a%0Ab",
            &[("x-dup", "1"), ("x-dup", "2"), ("x-bin", "caf\u{e9}")],
            &[("id", "1}:fence"), ("ctl", "a\u{1}b")],
        );
        for (template, reason) in [
            ("{id}", "brace"),
            ("{ctl}", "control"),
            ("{query.q}", "brace"),
            ("{query.c}", "control"),
            ("{header.x-dup}", "more than once"),
            ("{header.x-bin}", "visible ASCII"),
        ] {
            match key(template, &p) {
                Err(LockRejection::InvalidKeyMaterial { reason: r, .. }) => {
                    assert!(r.contains(reason), "{template}: {r}")
                }
                other => panic!("{template}: {other:?}"),
            }
        }
    }

    /// What a template with one placeholder made of `value`: the value escaped, after the
    /// template's literal, or a rejection that says why.
    fn taken_whole_or_refused(
        template: &str,
        parts: &Parts,
        value: &str,
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        let forging = value.contains(['{', '}']) || value.chars().any(char::is_control);
        match key(template, parts) {
            Ok(Some(key)) => {
                prop_assert!(!value.is_empty() && !forging, "{value:?} was taken");
                prop_assert_eq!(key, format!("t:{}", KeySegment(value)));
            }
            Err(LockRejection::MissingKeyMaterial { .. }) => prop_assert!(value.is_empty()),
            Err(LockRejection::InvalidKeyMaterial { .. }) => prop_assert!(forging),
            other => prop_assert!(false, "{template} with {value:?}: {other:?}"),
        }
        Ok(())
    }

    proptest! {
        /// Any text is a template or is refused, never a panic; a template keeps its text.
        /// Every placeholder of a template is a whole `:`-separated segment, and its text
        /// holds no `%`.
        #[test]
        fn any_text_is_parsed_or_refused(
            text in "[{}.:%a-z*/ -]{0,16}|([a:%-]|\\{[a-z]\\}|\\{\\{|\\}\\}){0,6}|.{0,24}",
        ) {
            if let Ok(template) = KeyTemplate::parse(&text) {
                prop_assert_eq!(template.as_str(), text.as_str());
                let segments = &template.segments;
                let literal = |i: Option<usize>, ok: fn(&str) -> bool| {
                    match i.and_then(|i| segments.get(i)) {
                        None => true,
                        Some(Segment::Literal(text)) => ok(text),
                        Some(_) => false,
                    }
                };
                for (i, segment) in segments.iter().enumerate() {
                    match segment {
                        Segment::Literal(text) => prop_assert!(!text.contains('%'), "{text:?}"),
                        _ => prop_assert!(
                            literal(i.checked_sub(1), |t| t.ends_with(':'))
                                && literal(Some(i + 1), |t| t.starts_with(':')),
                            "{segments:?}"
                        ),
                    }
                }
            }
        }

        /// A key splits on its `:`s into the template's segments, and each placeholder's
        /// segment decodes to its value, whatever the value holds and wherever it came
        /// from.
        #[test]
        fn keys_decode_to_their_values(pieces in pieces(
            "[a-z0-9_.{}<>é漢 -]{0,4}",
            prop_oneof!["[^{}\\p{Cc}]{1,8}", "[:%3Aa]{1,6}", Just("%3A".to_owned())],
        )) {
            let Some(key) = extract(&pieces) else { return Ok(()) };
            let split: Vec<&str> = key.split(':').collect();
            prop_assert_eq!(split.len(), pieces.len(), "{:?}", key);
            for (segment, piece) in split.into_iter().zip(&pieces) {
                match piece {
                    Piece::Literal(text) => prop_assert_eq!(segment, text),
                    Piece::Value { value, .. } => {
                        prop_assert_eq!(KeySegment::decode(segment), Some(value.clone()));
                    }
                }
            }
        }

        /// Two templates and their requests make the same key only if they name the same
        /// segments: the same text (from the template or a value alike) between the same
        /// `:`s. Tiny alphabets make both equal keys and forging attempts common.
        #[test]
        fn equal_keys_name_equal_segments(a in tiny_pieces(), b in tiny_pieces()) {
            if let (Some(key_a), Some(key_b)) = (extract(&a), extract(&b))
                && key_a == key_b
            {
                prop_assert_eq!(names(&a), names(&b), "both {:?}", key_a);
            }
        }

        /// A value from the request, whichever part it comes from and however it was
        /// encoded, goes into the key whole, or the request is refused: it can never add
        /// a brace or a control character to the key.
        #[test]
        fn request_values_are_taken_whole_or_refused(value in ".{0,16}", header in "[ -~]{0,16}") {
            let p = parts("/", &[], &[("id", &value)]);
            taken_whole_or_refused("t:{id}", &p, &value)?;
            let encoded: String = form_urlencoded::byte_serialize(value.as_bytes()).collect();
            let p = parts(&format!("/?q={encoded}"), &[], &[]);
            taken_whole_or_refused("t:{query.q}", &p, &value)?;
            let p = parts("/", &[("x-h", &header)], &[]);
            taken_whole_or_refused("t:{header.x-h}", &p, &header)?;
        }
    }

    /// One `:`-separated segment of a generated template: literal text, or a placeholder
    /// and the value the request gives it, in the query if `query`, else in the path.
    #[derive(Debug, Clone)]
    enum Piece {
        Literal(String),
        Value { query: bool, value: String },
    }

    /// Templates that keep the rules, as their segments: text drawn from `text` (with no
    /// `:`, `%` or control character), values from `value` (none empty, with no brace or
    /// control character: the layer refuses those).
    fn pieces(
        text: &'static str,
        value: impl Strategy<Value = String>,
    ) -> impl Strategy<Value = Vec<Piece>> {
        let piece = prop_oneof![
            text.prop_map(Piece::Literal),
            (any::<bool>(), value).prop_map(|(query, value)| Piece::Value { query, value }),
        ];
        proptest::collection::vec(piece, 1..5)
    }

    /// [`pieces`] over tiny alphabets.
    fn tiny_pieces() -> impl Strategy<Value = Vec<Piece>> {
        let value = prop_oneof![
            "[ab]",
            Just(":".to_owned()),
            Just("a:b".to_owned()),
            Just("%".to_owned()),
            Just("%3A".to_owned()),
        ];
        pieces("[ab]?", value)
    }

    /// The key the template `pieces` make extracts from a request that carries their
    /// values, each form-encoded in the query or as a path parameter. `None` for the
    /// empty template.
    fn extract(pieces: &[Piece]) -> Option<String> {
        let mut query = form_urlencoded::Serializer::new(String::new());
        let mut params = Vec::new();
        let written: Vec<String> = pieces
            .iter()
            .enumerate()
            .map(|(i, piece)| match piece {
                Piece::Literal(text) => text.replace('{', "{{").replace('}', "}}"),
                Piece::Value { query: true, value } => {
                    query.append_pair(&format!("q{i}"), value);
                    format!("{{query.q{i}}}")
                }
                Piece::Value {
                    query: false,
                    value,
                } => {
                    params.push((format!("p{i}"), value.as_str()));
                    format!("{{p{i}}}")
                }
            })
            .collect();
        let template = KeyTemplate::parse(&written.join(":")).ok()?;
        let params: Vec<(&str, &str)> = params.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let p = parts(&format!("/?{}", query.finish()), &[], &params);
        Some(template.extract(&p).unwrap().unwrap())
    }

    /// What a template and its values name: each segment's text.
    fn names(pieces: &[Piece]) -> Vec<&str> {
        pieces
            .iter()
            .map(|piece| match piece {
                Piece::Literal(text) | Piece::Value { value: text, .. } => text.as_str(),
            })
            .collect()
    }

    /// The forgeries the segment rule and the escaping stop: each pair made one key before.
    #[test]
    fn forged_keys_differ() {
        let cases = [
            // t:{a}:{b}: "x:y", "z" against "x", "y:z"
            (
                "t:{a}:{b}",
                parts("/", &[], &[("a", "x:y"), ("b", "z")]),
                "t:x%3Ay:z",
            ),
            (
                "t:{a}:{b}",
                parts("/", &[], &[("a", "x"), ("b", "y:z")]),
                "t:x:y%3Az",
            ),
            // balance:{id} with "1:2" against balance:{a}:{b} with 1, 2
            (
                "balance:{id}",
                parts("/", &[], &[("id", "1:2")]),
                "balance:1%3A2",
            ),
            (
                "balance:{a}:{b}",
                parts("/", &[], &[("a", "1"), ("b", "2")]),
                "balance:1:2",
            ),
            // from a header and the query, and a value that looks escaped already
            (
                "doc:{header.x-tenant}:{query.name}",
                parts("/?name=readme", &[("x-tenant", "acme:x")], &[]),
                "doc:acme%3Ax:readme",
            ),
            (
                "doc:{header.x-tenant}:{query.name}",
                parts("/?name=x%3Areadme", &[("x-tenant", "acme")], &[]),
                "doc:acme:x%3Areadme",
            ),
            ("doc:{id}", parts("/", &[], &[("id", "%3A")]), "doc:%253A"),
        ];
        for (template, parts, expected) in &cases {
            assert_eq!(
                key(template, parts).unwrap().unwrap(),
                *expected,
                "{template}"
            );
        }
        // ordinary values keep the keys they had
        let p = parts("/?q=7f3c-aa01", &[], &[("id", "42")]);
        assert_eq!(
            key("a:{id}:{query.q}", &p).unwrap().unwrap(),
            "a:42:7f3c-aa01"
        );
    }

    #[test]
    fn key_fn_adapts_a_closure() {
        let f = key_fn(|parts: &Parts| Ok(PathParams::of(parts).get("id").map(str::to_owned)));
        assert_eq!(
            f.extract(&parts("/", &[], &[("id", "9")])).unwrap(),
            Some("9".into())
        );
        assert_eq!(f.extract(&parts("/", &[], &[])).unwrap(), None);
        assert!(format!("{f:?}").contains("KeyFn"));
    }
}
