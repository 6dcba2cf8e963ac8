//! Key templates: `"balance:{id}"`, `"order:{self.account.id}"`, `"legacy:<id>"`.
//!
//! A template is literal text with placeholders. `{path}` (or `<path>`, the alias) names a
//! parameter, or a field path through one, formatted with `Display`. `{{` and `}}` are
//! literal braces. A `<` that does not open a well-formed `<path>` is literal text.

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

/// Splits `template` into text and placeholders, or says what is wrong with it.
pub(crate) fn parse(template: &str) -> Result<Vec<Segment>, String> {
    if template.is_empty() {
        return Err("empty key template: a lock needs a name, e.g. \"balance:{id}\"".into());
    }
    let mut segments = Vec::new();
    let mut text = String::new();
    let mut rest = template;
    while let Some(c) = rest.chars().next() {
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
                flush(&mut text, &mut segments);
                segments.push(Segment::Path(path));
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
                        flush(&mut text, &mut segments);
                        segments.push(Segment::Path(path));
                        rest = &rest[i + 2..];
                    }
                    None => {
                        text.push('<');
                        rest = &rest[1..];
                    }
                }
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
    use super::*;
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
        let t = template(quote!("acct:{self.account.id}/{pair.0}")).unwrap();
        assert_eq!(
            t.segments,
            [
                text("acct:"),
                path(&["self", "account", "id"]),
                text("/"),
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
        let t = template(quote!("<a.b>-<c>")).unwrap();
        assert_eq!(t.segments, [path(&["a", "b"]), text("-"), path(&["c"])]);
    }

    #[test]
    fn a_lone_angle_bracket_is_text() {
        assert_eq!(parse("a<b").unwrap(), [text("a<b")]);
        assert_eq!(parse("a<-b>").unwrap(), [text("a<-b>")]);
        assert_eq!(parse("a<<b>").unwrap(), [text("a<"), path(&["b"])]);
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
        fn any_text_is_parsed_or_refused(text in "[{}<>.:a-z0-9_ ]{0,16}|.{0,24}") {
            match parse(&text) {
                Ok(segments) => {
                    let t = Template { source: text.clone(), segments, span: Span::call_site() };
                    let format = t.format_string();
                    let unescaped = format.replace("{{", "").replace("}}", "");
                    proptest::prop_assert_eq!(unescaped.matches("{}").count(), t.paths().count());
                }
                Err(reason) => proptest::prop_assert!(!reason.is_empty()),
            }
        }
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
            parse("clé:{id}é").unwrap(),
            [text("clé:"), path(&["id"]), text("é")]
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
