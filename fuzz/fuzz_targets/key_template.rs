//! Any text as the layer's key template, and any query string and header value as a
//! request to build a key from: never a panic, and a key built holds no brace or control
//! character that came from the request, and no `%` but a value's escape.
#![no_main]

use http::Request;
use libfuzzer_sys::fuzz_target;
use lock_axum::{KeyExtractor, KeyTemplate, LockRejection};

fuzz_target!(|input: (&str, &str, &[u8])| {
    let (template, query, header) = input;
    let Ok(template) = KeyTemplate::parse(template) else {
        return;
    };
    assert_eq!(template.as_str(), input.0);
    let Ok(request) = Request::builder()
        .uri(format!("/?{query}"))
        .header("x-h", header)
        .body(())
    else {
        return;
    };
    let (parts, ()) = request.into_parts();
    match template.extract(&parts) {
        Ok(Some(key)) => {
            // The template's own braces are written `{{` and `}}`: any other brace, or a
            // control character, would have come from the request.
            let literal_braces = input.0.matches("{{").count() + input.0.matches("}}").count();
            let braces = key.matches(['{', '}']).count();
            assert!(braces <= literal_braces, "{key:?} from {:?}", input.0);
            assert!(!key.chars().any(char::is_control), "{key:?}");
            // A template's text holds no `%`: every one in the key opens a value's escape.
            for (i, _) in key.match_indices('%') {
                let escape = key.get(i..i + 3).unwrap_or_default();
                assert!(
                    ["%25", "%3A", "%7B", "%7D"].contains(&escape),
                    "{key:?} from {:?}",
                    input.0
                );
            }
        }
        Ok(None) => unreachable!("a template always makes a key or refuses"),
        Err(
            LockRejection::MissingKeyMaterial { .. } | LockRejection::InvalidKeyMaterial { .. },
        ) => {}
        Err(other) => panic!("{other:?}"),
    }
});
