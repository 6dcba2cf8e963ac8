//! What is refused before the store is asked: a bad key, a kind the store lacks.

use super::*;

/// Bad keys (empty, control characters, over the length limit, starting with '}') are
/// refused as `InvalidKey` by every call, before the store: nothing is locked under a
/// similar valid key, such as one a careless store would have made of it.
pub async fn bad_keys_are_refused_before_the_store(store: &impl StoreUnderTest) {
    let [a, b] = two(store).await;
    let long = "x".repeat(DEFAULT_MAX_KEY_LEN + 1);
    let cases: [(&str, &[&str]); 6] = [
        ("", &[" ", "_"]),
        ("line\nbreak", &["line", "linebreak", "line break"]),
        ("nul\0byte", &["nul", "nulbyte"]),
        ("del\u{7f}ete", &["del", "delete"]),
        ("}brace", &["brace", "{brace}"]),
        (&long, &[&long[..DEFAULT_MAX_KEY_LEN]]),
    ];
    for (bad, _) in cases {
        let err = a.lock_with(bad, long_wait()).await.unwrap_err();
        assert!(err.is_invalid_key(), "lock_with({bad:?}): {err}");
        let err = a.try_lock(bad).await.unwrap_err();
        assert!(err.is_invalid_key(), "try_lock({bad:?}): {err}");
        let ran = AtomicBool::new(false);
        let body = async { ran.store(true, Ordering::SeqCst) };
        let err = a.with_lock(bad, body).await.unwrap_err();
        assert!(err.is_invalid_key(), "with_lock({bad:?}): {err}");
        assert!(
            !ran.load(Ordering::SeqCst),
            "with_lock({bad:?}) ran its body"
        );
    }
    a.flush().await;
    let similar: Vec<&str> = cases.iter().flat_map(|(_, s)| s.iter().copied()).collect();
    assert_all_free(&[&b], &similar).await;
}

/// Each kind beyond exclusive and fair is either taken (a store that has it) or refused
/// as `Unsupported`, naming the store and the kind, with nothing locked; never another
/// error, never a panic.
pub async fn unsupported_kinds_are_refused_naming_store_and_kind(store: &impl StoreUnderTest) {
    let [a, b] = two(store).await;
    let kinds = [
        LockKind::Read,
        LockKind::Write,
        LockKind::Semaphore { permits: 2 },
    ];
    for (i, kind) in kinds.into_iter().enumerate() {
        let key = format!("kind:{i}");
        let opts = LockOptions::new().kind(kind).wait(PATIENCE);
        let taken = tokio::spawn({
            let (a, key) = (a.clone(), key.clone());
            async move {
                let guard = a.lock_with(&key, opts).await?;
                let kind = guard.kind();
                guard.release().await?;
                Ok::<_, LockError>(kind)
            }
        })
        .await
        .unwrap_or_else(|e| panic!("a {kind} lock on {}: {e}", store.name()));
        let err = match taken {
            Ok(held) => {
                assert_eq!(held, kind, "asked for a {kind} lock");
                continue;
            }
            Err(err) => err,
        };
        let LockError::Unsupported {
            store: named,
            kind: asked,
            ..
        } = &err
        else {
            panic!(
                "a {kind} lock on {}: expected it or Unsupported, got: {err}",
                store.name()
            );
        };
        assert_eq!((named.as_str(), *asked), (store.name(), kind));
        assert_eq!(err.key(), Some(key.as_str()));
        let message = err.to_string();
        for name in [store.name(), &kind.to_string()] {
            assert!(message.contains(name), "{message:?} does not name {name:?}");
        }
        assert!(
            free_for(&b, &key).await,
            "a refused {kind} lock left a hold"
        );
    }
}
