//! Any bytes as a lock name: accepted exactly when valid, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lock_core::LockKey;

fuzz_target!(|data: &[u8]| {
    let Ok(name) = std::str::from_utf8(data) else {
        return;
    };
    let valid = !name.is_empty()
        && name.len() <= lock_core::DEFAULT_MAX_KEY_LEN
        && !name.chars().any(char::is_control)
        && !name.starts_with('}');
    match LockKey::new(name) {
        Ok(key) => {
            assert!(valid, "{name:?} was accepted");
            assert_eq!(key.as_str(), name);
        }
        Err(e) => {
            assert!(!valid, "{name:?} was refused: {e}");
            assert!(e.is_invalid_key());
        }
    }
});
