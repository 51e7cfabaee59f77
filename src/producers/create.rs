//! Creating a pipeline: its empty first version, on a key that no dataset,
//! table or other pipeline occupies (keys are exclusive, see
//! [`crate::store::occupancy`]).

use super::manifest::PipelineManifest;
use crate::error::{Error, Result};
use crate::store::occupancy::{self, Kind};
use crate::store::StoreHandle;
use crate::table::commit::{self, CommitOptions, Outcome};
use crate::table::versions;

/// Create the pipeline at `root` with `first` as its version 0.
///
/// If a pipeline is there already: with `exist_ok` its latest version is
/// returned, otherwise `KeyOccupied`. A dataset or table at `root`, or
/// anything inside or around it, is `KeyOccupied`; nothing is written.
///
/// Cost: [`occupancy::check_free`] (5 HEADs per level of the key, 1 LIST),
/// then 1 GET + 1 HEAD and 2 PUTs (the manifest create-only, the pointer).
pub async fn create(
    store: &StoreHandle,
    root: &str,
    first: PipelineManifest,
    exist_ok: bool,
) -> Result<PipelineManifest> {
    crate::store::keys::object_segments(root)?;
    let occupied = |kind: Kind| Error::KeyOccupied {
        key: root.to_string(),
        creating: Kind::Pipeline.noun(),
        reason: format!("{} is stored there", kind.noun()),
    };
    if let Some(at) = occupancy::check_free(store, root, Kind::Pipeline).await? {
        if !exist_ok {
            return Err(occupied(at.kind));
        }
        if let Some(latest) = versions::latest_of::<PipelineManifest>(store, root, false).await? {
            return Ok(latest.manifest);
        }
    }
    let mut lost_to: Option<PipelineManifest> = None;
    let out = commit::commit_versioned::<PipelineManifest, _>(
        store,
        root,
        &CommitOptions::default(),
        None,
        |base| match base {
            None => Ok(Some(first.clone())),
            Some(b) => {
                lost_to = Some(b.clone());
                Ok(None)
            }
        },
    )
    .await?;
    match (out, lost_to) {
        (Outcome::Committed { manifest, .. }, _) => Ok(*manifest),
        // Another creator got there first.
        (Outcome::Unchanged { .. }, Some(theirs)) if exist_ok => Ok(theirs),
        (Outcome::Unchanged { .. }, _) => Err(occupied(Kind::Pipeline)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::PutMode;
    use bytes::Bytes;
    use std::collections::BTreeMap;

    fn first() -> PipelineManifest {
        PipelineManifest::new(
            "create",
            serde_json::json!({}),
            serde_json::json!({"nodes": []}),
            BTreeMap::new(),
        )
    }

    #[test]
    fn create_refuses_occupied_keys_and_honours_exist_ok() {
        let s = StoreHandle::open("memory://", &BTreeMap::new()).unwrap();
        crate::runtime::block_on(async {
            let made = create(&s, "p", first(), false).await.unwrap();
            assert_eq!(made.version, 0);
            let again = create(&s, "p", first(), false).await;
            assert!(
                matches!(&again, Err(Error::KeyOccupied { reason, .. }) if reason.contains("a pipeline")),
                "{again:?}"
            );
            assert_eq!(create(&s, "p", first(), true).await.unwrap().version, 0);
            let inside = create(&s, "p/q", first(), false).await;
            assert!(matches!(inside, Err(Error::KeyOccupied { .. })), "{inside:?}");
            s.put("d/x/_SUCCESS", Bytes::new(), PutMode::Create)
                .await
                .unwrap();
            let around = create(&s, "d", first(), true).await;
            assert!(
                matches!(&around, Err(Error::KeyOccupied { reason, .. }) if reason.contains("\"d/x\"")),
                "{around:?}"
            );
            assert!(s.list("d", true).await.unwrap().objects.len() == 1);
        })
        .unwrap();
    }
}
