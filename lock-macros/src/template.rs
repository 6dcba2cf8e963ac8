//! Key templates: `"balance:{id}"`, `"order:{self.account.id}"`, `"legacy:<id>"`.
//!
//! A template is literal text with placeholders. `{path}` (or `<path>`, the alias) names a
//! parameter, or a field path through one, formatted with `Display` and escaped by
//! `lock_core::KeySegment`. `{{` and `}}` are literal braces. A `<` that does not open a
//! well-formed `<path>` is literal text. A placeholder is a whole `:`-separated segment, and
//! the text holds no `%`, so that no two templates and their values make the same key
//! unless they name the same segments.

use proc_macro2::Span;
use syn::LitStr;

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    /// Literal text, braces already unescaped.
    Text(String),
    /// A placeholder: the parameter (`self` included) then the fields, e.g.
    /// `["self", "account", "0"]`.
    Path(Vec<String>),
}

/// A parsed key template and the literal it came from.
#[derive(Debug, Clone)]
pub(crate) struct Template {
    /// The template as written, which labels the lock in metrics and traces.
    pub(crate) source: String,
    pub(crate) segments: Vec<Segment>,
    pub(crate) span: Span,
}

impl Template {
    /// Parses the string literal `lit`; errors point at it.
    pub(crate) fn from_lit(lit: &LitStr) -> syn::Result<Self> {
        let source = lit.value();
        let segments = parse(&source).map_err(|msg| syn::Error::new(lit.span(), msg))?;
        Ok(Self {
            source,
            segments,
            span: lit.span(),
        })
    }

    /// The placeholders, in order.
    pub(crate) fn paths(&self) -> impl Iterator<Item = &[String]> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Path(p) => Some(p.as_slice()),
            Segment::Text(_) => None,
        })
    }

    /// A `format!` string for the template: text with braces re-escaped, `{}` per placeholder.
    pub(crate) fn format_string(&self) -> String {
        let mut out = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Text(t) => out.push_str(&t.replace('{', "{{").replace('}', "}}")),
                Segment::Path(_) => out.push_str("{}"),
            }
        }
        out
    }
}

/// Why a placeholder must be a whole segment, for the errors that say it is not.
const WHOLE_SEGMENT: &str = "a placeholder must be a whole `:`-separated segment, \
                             so that no value can pass for part of another key";

/// Splits `template` into text and placeholders, or says what is wrong with it.
///
/// Each placeholder must be a whole `:`-separated segment, and the text may not hold a
/// `%`: with the values escaped by `lock_core::KeySegment`, a key then names one sequence
/// of segments, whichever template and values it came from.
pub(crate) fn parse(template: &str) -> Result<Vec<Segment>, String> {
    if template.is_empty() {
        return Err("empty key template: a lock needs a name, e.g. \"balance:{id}\"".into());
    }
    let mut segments = Vec::new();
    let mut text = String::new();
    let mut rest = template;
    // The placeholder just read, as written, which a `:` or the end must follow.
    let mut closed: Option<&str> = None;
    while let Some(c) = rest.chars().next() {
        if let Some(written) = closed.take()
            && c != ':'
        {
            return Err(format!(
                "`{written}` is followed by `{c}` in key template {template:?}: {WHOLE_SEGMENT}"
            ));
        }
        match c {
            '{' if rest.starts_with("{{") => {
                text.push('{');
                rest = &rest[2..];
            }
            '}' if rest.starts_with("}}") => {
                text.push('}');
                rest = &rest[2..];
            }
            '{' => {
                let Some(end) = rest.find('}') else {
                    return Err(format!(
                        "unterminated `{{` in key template {template:?}: close it with `}}`, \
                         or write `{{{{` for a literal brace"
                    ));
                };
                let inner = &rest[1..end];
                let path = placeholder(inner).map_err(|why| {
                    format!("invalid placeholder `{{{inner}}}` in key template: {why}")
                })?;
                let written = &rest[..=end];
                push_path(template, written, path, &mut text, &mut segments)?;
                closed = Some(written);
                rest = &rest[end + 1..];
            }
            '}' => {
                return Err(format!(
                    "unmatched `}}` in key template {template:?}: write `}}}}` for a literal brace"
                ));
            }
            '<' => {
                // `<path>` is an alias of `{path}`; anything else is a literal `<`.
                let alias = rest[1..]
                    .find(['>', '<'])
                    .filter(|&i| rest.as_bytes()[1 + i] == b'>')
                    .filter(|&i| !rest[1..=i].contains(char::is_whitespace))
                    .and_then(|i| Some((placeholder(&rest[1..=i]).ok()?, i)));
                match alias {
                    Some((path, i)) => {
                        let written = &rest[..i + 2];
                        push_path(template, written, path, &mut text, &mut segments)?;
                        closed = Some(written);
                        rest = &rest[i + 2..];
                    }
                    None => {
                        text.push('<');
                        rest = &rest[1..];
                    }
                }
            }
            '%' => {
                let at = template.len() - rest.len();
                return Err(format!(
                    "`%` at byte {at} of key template {template:?}: \
                     `%` is reserved for escaped values"
                ));
            }
            c => {
                text.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    flush(&mut text, &mut segments);
    Ok(segments)
}

/// Adds the placeholder `written` after the text before it, which must end a segment.
fn push_path(
    template: &str,
    written: &str,
    path: Vec<String>,
    text: &mut String,
    segments: &mut Vec<Segment>,
) -> Result<(), String> {
    if let Some(c) = text.chars().next_back().filter(|&c| c != ':') {
        return Err(format!(
            "`{written}` follows `{c}` in key template {template:?}: {WHOLE_SEGMENT}"
        ));
    }
    flush(text, segments);
    segments.push(Segment::Path(path));
    Ok(())
}

fn flush(text: &mut String, segments: &mut Vec<Segment>) {
    if !text.is_empty() {
        segments.push(Segment::Text(std::mem::take(text)));
    }
}

/// `arg`, `arg.field`, `self.a.0`: the parts, or why not.
fn placeholder(inner: &str) -> Result<Vec<String>, String> {
    let inner = inner.trim();
    if inner.is_empty() {
        return Err("name a parameter, e.g. `{id}`".into());
    }
    if inner.contains(':') {
        return Err(
            "format specs are not supported: placeholders are formatted with `Display`".into(),
        );
    }
    let parts: Vec<String> = inner.split('.').map(|p| p.trim().to_owned()).collect();
    if !is_ident(&parts[0]) {
        return Err(
            "expected a parameter name, optionally followed by fields, e.g. `{arg.field}`".into(),
        );
    }
    for field in &parts[1..] {
        let index = !field.is_empty() && field.bytes().all(|b| b.is_ascii_digit());
        if !(index || is_ident(field)) || field == "self" {
            return Err(format!("`{field}` is not a field name"));
        }
    }
    Ok(parts)
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c == '_' || c.is_alphabetic() => {}
        _ => return false,
    }
    s != "_" && chars.all(|c| c == '_' || c.is_alphanumeric())
}

#[cfg(test)]
mod tests {
    use std::fmt::Write;

    use super::*;
    use lock_core::KeySegment;
    use proptest::prelude::*;
    use quote::quote;

    fn text(s: &str) -> Segment {
        Segment::Text(s.to_owned())
    }

    fn path(p: &[&str]) -> Segment {
        Segment::Path(p.iter().map(|s| (*s).to_owned()).collect())
    }

    fn template(tokens: proc_macro2::TokenStream) -> syn::Result<Template> {
        Template::from_lit(&syn::parse2::<LitStr>(tokens).unwrap())
    }

    #[test]
    fn text_and_placeholders() {
        let t = template(quote!("balance:{id}")).unwrap();
        assert_eq!(t.segments, [text("balance:"), path(&["id"])]);
        assert_eq!(t.format_string(), "balance:{}");
    }

    #[test]
    fn field_paths_self_and_tuple_indices() {
        let t = template(quote!("acct:{self.account.id}:{pair.0}")).unwrap();
        assert_eq!(
            t.segments,
            [
                text("acct:"),
                path(&["self", "account", "id"]),
                text(":"),
                path(&["pair", "0"])
            ]
        );
        assert_eq!(
            t.paths().collect::<Vec<_>>(),
            [&["self", "account", "id"][..], &["pair", "0"][..]]
        );
    }

    #[test]
    fn angle_brackets_are_an_alias() {
        let t = template(quote!("balance:<id>")).unwrap();
        assert_eq!(t.segments, [text("balance:"), path(&["id"])]);
        let t = template(quote!("<a.b>:<c>")).unwrap();
        assert_eq!(t.segments, [path(&["a", "b"]), text(":"), path(&["c"])]);
    }

    #[test]
    fn a_lone_angle_bracket_is_text() {
        assert_eq!(parse("a<b").unwrap(), [text("a<b")]);
        assert_eq!(parse("a<-b>").unwrap(), [text("a<-b>")]);
        assert_eq!(parse("a<:<b>").unwrap(), [text("a<:"), path(&["b"])]);
        assert_eq!(parse("x>y").unwrap(), [text("x>y")]);
        assert_eq!(parse("a < b > c").unwrap(), [text("a < b > c")]);
    }

    #[test]
    fn doubled_braces_are_literal() {
        let t = template(quote!("{{raw}}:{id}")).unwrap();
        assert_eq!(t.segments, [text("{raw}:"), path(&["id"])]);
        assert_eq!(t.format_string(), "{{raw}}:{}");
    }

    proptest::proptest! {
        /// Any text is a template or is refused with a reason, never a panic; a template
        /// formats with one `{}` per placeholder, its own braces escaped.
        #[test]
        fn any_text_is_parsed_or_refused(
            text in "[{}<>.:%a-z0-9_ -]{0,16}|([a:%<-]|[{<][a-z][}>]|\\{\\{|\\}\\}){0,6}|.{0,24}",
        ) {
            match parse(&text) {
                Ok(segments) => {
                    proptest::prop_assert!(whole_segments(&segments), "{segments:?}");
                    let t = Template { source: text.clone(), segments, span: Span::call_site() };
                    let format = t.format_string();
                    let unescaped = format.replace("{{", "").replace("}}", "");
                    proptest::prop_assert_eq!(unescaped.matches("{}").count(), t.paths().count());
                }
                Err(reason) => proptest::prop_assert!(!reason.is_empty()),
            }
        }

        /// A key splits on its `:`s into the template's segments, and each placeholder's
        /// segment decodes to its value, whatever the value holds.
        #[test]
        fn keys_decode_to_their_values(pieces in pieces(
            "[a-z0-9_.{}<é漢 -]{0,4}",
            prop_oneof![".{0,8}", "[:%3Aa{}]{0,6}", Just("%3A".to_owned())],
        )) {
            let Some(key) = render(&pieces) else { return Ok(()) };
            let split: Vec<&str> = key.split(':').collect();
            proptest::prop_assert_eq!(split.len(), pieces.len(), "{:?}", key);
            for (segment, piece) in split.into_iter().zip(&pieces) {
                match piece {
                    Piece::Text(text) => proptest::prop_assert_eq!(segment, text),
                    Piece::Value { value, .. } => {
                        proptest::prop_assert_eq!(KeySegment::decode(segment), Some(value.clone()));
                    }
                }
            }
        }

        /// Two templates and their values make the same key only if they name the same
        /// segments: the same text (from the template or a value alike) between the same
        /// `:`s. Tiny alphabets make both equal keys and forging attempts common.
        #[test]
        fn equal_keys_name_equal_segments(a in tiny_pieces(), b in tiny_pieces()) {
            if let (Some(key_a), Some(key_b)) = (render(&a), render(&b))
                && key_a == key_b
            {
                proptest::prop_assert_eq!(names(&a), names(&b), "both {:?}", key_a);
            }
        }
    }

    /// One `:`-separated segment of a generated template: text, or a placeholder (written
    /// `{..}`, or `<..>` if `angle`) and the value its parameter has.
    #[derive(Debug, Clone)]
    enum Piece {
        Text(String),
        Value { angle: bool, value: String },
    }

    /// Templates that keep the rules, as their segments: text drawn from `text` (with no
    /// `:`, `%` or `>`, which could close an alias), values from `value`.
    fn pieces(
        text: &'static str,
        value: impl Strategy<Value = String>,
    ) -> impl Strategy<Value = Vec<Piece>> {
        let piece = prop_oneof![
            text.prop_map(Piece::Text),
            (proptest::bool::ANY, value).prop_map(|(angle, value)| Piece::Value { angle, value }),
        ];
        proptest::collection::vec(piece, 1..5)
    }

    /// The key the expansion of the template `pieces` make builds from their values: the
    /// text as written, each value through `KeySegment`. `None` for the empty template.
    fn render(pieces: &[Piece]) -> Option<String> {
        let written: Vec<String> = pieces
            .iter()
            .enumerate()
            .map(|(i, piece)| match piece {
                Piece::Text(text) => text.replace('{', "{{").replace('}', "}}"),
                Piece::Value { angle: false, .. } => format!("{{p{i}}}"),
                Piece::Value { angle: true, .. } => format!("<p{i}>"),
            })
            .collect();
        let segments = parse(&written.join(":")).ok()?;
        assert!(whole_segments(&segments), "{segments:?}");
        let mut values = pieces.iter().filter_map(|piece| match piece {
            Piece::Value { value, .. } => Some(value),
            Piece::Text(_) => None,
        });
        let mut key = String::new();
        for segment in &segments {
            match segment {
                Segment::Text(text) => key.push_str(text),
                Segment::Path(_) => write!(key, "{}", KeySegment(values.next().unwrap())).unwrap(),
            }
        }
        assert!(values.next().is_none());
        Some(key)
    }

    /// [`pieces`] over tiny alphabets.
    fn tiny_pieces() -> impl Strategy<Value = Vec<Piece>> {
        let value = prop_oneof![
            "[ab]?",
            Just(":".to_owned()),
            Just("a:b".to_owned()),
            Just("%".to_owned()),
            Just("%3A".to_owned()),
        ];
        pieces("[ab]?", value)
    }

    /// What a template and its values name: each segment's text.
    fn names(pieces: &[Piece]) -> Vec<&str> {
        pieces
            .iter()
            .map(|piece| match piece {
                Piece::Text(text) | Piece::Value { value: text, .. } => text.as_str(),
            })
            .collect()
    }

    /// Whether every placeholder is a whole `:`-separated segment and no text holds a `%`.
    fn whole_segments(segments: &[Segment]) -> bool {
        let text_where =
            |i: Option<usize>, ok: fn(&str) -> bool| match i.and_then(|i| segments.get(i)) {
                None => true,
                Some(Segment::Text(text)) => ok(text),
                Some(Segment::Path(_)) => false,
            };
        segments
            .iter()
            .enumerate()
            .all(|(i, segment)| match segment {
                Segment::Text(text) => !text.contains('%'),
                Segment::Path(_) => {
                    text_where(i.checked_sub(1), |t| t.ends_with(':'))
                        && text_where(Some(i + 1), |t| t.starts_with(':'))
                }
            })
    }

    #[test]
    fn placeholders_are_whole_segments() {
        for ok in [
            "balance:{id}",
            "{tenant}:x:{id}",
            "{id}",
            "a::{id}:",
            "<a>:{b}",
            "{{x}}:{id}",
        ] {
            assert!(parse(ok).is_ok(), "{ok:?}");
        }
        let cases = [
            ("balance-{id}", "`{id}` follows `-`"),
            ("x{a}:y", "`{a}` follows `x`"),
            ("{a}{b}", "`{a}` is followed by `{`"),
            ("{a}x", "`{a}` is followed by `x`"),
            ("<a>-x", "`<a>` is followed by `-`"),
            ("a<<b>", "`<b>` follows `<`"),
            ("{{{id}", "`{id}` follows `{`"),
            ("{ id }}}", "`{ id }` is followed by `}`"),
        ];
        for (input, what) in cases {
            let err = parse(input).unwrap_err();
            assert_eq!(
                err,
                format!(
                    "{what} in key template {input:?}: a placeholder must be a whole \
                     `:`-separated segment, so that no value can pass for part of another key"
                )
            );
        }
    }

    #[test]
    fn percent_is_reserved() {
        assert_eq!(
            parse("50%:{id}").unwrap_err(),
            "`%` at byte 2 of key template \"50%:{id}\": `%` is reserved for escaped values"
        );
        assert!(parse("a:{id}:%3A").unwrap_err().contains("at byte 7"));
    }

    /// The forgeries the segment rule and the escaping stop: each pair made one key before.
    #[test]
    fn forged_keys_differ() {
        let text = |t: &str| Piece::Text(t.to_owned());
        let value = |v: &str| Piece::Value {
            angle: false,
            value: v.to_owned(),
        };
        let pairs = [
            (
                vec![text("t"), value("x:y"), value("z")],
                vec![text("t"), value("x"), value("y:z")],
            ),
            (
                vec![text("balance"), value("1:2")],
                vec![text("balance"), value("1"), value("2")],
            ),
        ];
        for (a, b) in pairs {
            assert_ne!(render(&a), render(&b), "{a:?} {b:?}");
        }
        assert_eq!(
            render(&[text("t"), value("x:y"), value("z")]).unwrap(),
            "t:x%3Ay:z"
        );
        assert_eq!(
            render(&[text("balance"), value("1:2")]).unwrap(),
            "balance:1%3A2"
        );
        // the same name, not a forgery: a value that is the other template's text
        assert_eq!(
            render(&[text("a"), value("b")]),
            render(&[text("a"), text("b")])
        );
    }

    #[test]
    fn no_placeholder_is_fine() {
        assert_eq!(parse("global-cron").unwrap(), [text("global-cron")]);
    }

    #[test]
    fn whitespace_inside_braces_is_trimmed() {
        assert_eq!(parse("{ id }").unwrap(), [path(&["id"])]);
    }

    #[test]
    fn unicode_text_is_kept() {
        assert_eq!(
            parse("clé:{id}:é").unwrap(),
            [text("clé:"), path(&["id"]), text(":é")]
        );
    }

    #[test]
    fn errors_point_at_the_literal() {
        let lit: LitStr = syn::parse2(quote!("balance:{id")).unwrap();
        let err = Template::from_lit(&lit).unwrap_err();
        assert!(err.to_string().starts_with("unterminated `{`"), "{err}");
        assert_eq!(format!("{:?}", err.span()), format!("{:?}", lit.span()));
    }

    #[test]
    fn malformed_templates() {
        let cases = [
            ("", "empty key template"),
            ("a:{id", "unterminated `{`"),
            ("a:}", "unmatched `}`"),
            ("a:{}", "name a parameter"),
            ("a:{id:?}", "format specs are not supported"),
            ("a:{1x}", "expected a parameter name"),
            ("a:{x-y}", "expected a parameter name"),
            ("a:{_}", "expected a parameter name"),
            ("a:{x.}", "`` is not a field name"),
            ("a:{x.self}", "`self` is not a field name"),
        ];
        for (input, expected) in cases {
            let err = parse(input).unwrap_err();
            assert!(err.contains(expected), "{input:?}: {err}");
        }
    }
}
