//! A fence table made by an earlier version, for the database suites that check it is
//! upgraded in place.

use lock_core::Locker;

/// On a fence table of an earlier version, whose only row gave `ledger` the token 41:
/// `candidate` leads the election `ledger` with token 42, which `reader`, holding
/// nothing, reads back with the leader's id; a plain lock taken after it shows token 43
/// and no id.
pub(crate) async fn an_upgraded_fence_table_names_its_leader(candidate: &Locker, reader: &Locker) {
    let leadership = candidate
        .election("ledger")
        .campaign("replica-a")
        .await
        .unwrap();
    assert_eq!(leadership.fencing_token(), 42);
    let leader = reader.election("ledger").leader().await.unwrap();
    let leader = leader.expect("someone leads");
    assert_eq!(
        (leader.id.as_str(), leader.fencing_token),
        ("replica-a", Some(42))
    );
    leadership.resign().await.unwrap();

    let guard = candidate.lock("ledger").await.unwrap();
    let info = reader.inspect("ledger").await.unwrap().expect("held");
    assert_eq!(info.holders[0].fencing_token, Some(43), "{info:?}");
    assert_eq!(info.holders[0].holder_id, None, "{info:?}");
    guard.release().await.unwrap();
}
