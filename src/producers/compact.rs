//! Compaction of a node's stored parts (`Pipeline.compact`): patched parts
//! are rewritten with their patches merged in, and runs of small parts
//! (left by updates that removed rows, or by many small rewrites of one
//! range) are merged into parts of about `target_rows` rows. Every other
//! part is kept by reference, so a compaction of a compact node writes
//! nothing. The rows do not change: the new state has an empty update.

use super::manifest::NodeState;
use super::node::{Env, Kind, NodeView};
use super::parts::{units, RangePart};
use super::partset::PartSet;
use crate::error::{Error, Result};

/// A part below this share of `target_rows` is small: merged with small or
/// patched neighbours.
const SMALL_SHARE: usize = 2;

/// What [`compact`] did to one list of parts.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PartsCompacted {
    /// Parts (and patched parts) rewritten, and the parts written for them.
    pub rewritten: usize,
    pub written: usize,
}

/// The ranges of `parts` (indices, in order) to rewrite: each run of
/// consecutive units that are patched or small, unless the run is one
/// small unpatched part alone (rewriting it would change nothing).
fn groups(layout: &PartSet, parts: &[RangePart]) -> Result<Vec<std::ops::Range<usize>>> {
    if parts.is_empty() {
        return Ok(Vec::new());
    }
    let small = (layout.target_rows / SMALL_SHARE).max(1) as u64;
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    let mut run: Option<std::ops::Range<usize>> = None;
    let mut close = |run: &mut Option<std::ops::Range<usize>>| {
        if let Some(r) = run.take() {
            let alone = r.len() == 1 && parts[r.start].patches.is_empty();
            if !alone {
                out.push(r);
            }
        }
    };
    for unit in units(parts, &layout.schema, &layout.cut_key)? {
        let unit_parts = &parts[unit.clone()];
        let patched = unit_parts.iter().any(|p| !p.patches.is_empty());
        let is_small = unit_parts.len() == 1 && unit_parts[0].rows < small;
        if patched || is_small {
            run = Some(match run.take() {
                Some(r) => r.start..unit.end,
                None => unit,
            });
        } else {
            close(&mut run);
        }
    }
    close(&mut run);
    Ok(out)
}

/// `parts` compacted (see the module docs); new parts are named
/// `prefix`-gNNNNN-*. Objects written are appended to `created`.
pub fn compact_parts(
    layout: &std::sync::Arc<PartSet>,
    parts: &[RangePart],
    prefix: &str,
    created: &mut Vec<String>,
) -> Result<(Vec<RangePart>, PartsCompacted)> {
    let mut out = Vec::with_capacity(parts.len());
    let mut done = PartsCompacted::default();
    let mut next = 0;
    for (g, range) in groups(layout, parts)?.into_iter().enumerate() {
        out.extend(parts[next..range.start].iter().cloned());
        let group = parts[range.clone()].to_vec();
        done.rewritten += group.len();
        let rows = layout.scan(group, None);
        let written = layout.write(&format!("{prefix}-g{g:05}"), rows, created)?;
        done.written += written.len();
        out.extend(written);
        next = range.end;
    }
    out.extend(parts[next..].iter().cloned());
    Ok((out, done))
}

/// A source's or stage's state compacted: its content and key-mappings
/// parts (see the module docs), with an empty update. Returns the new
/// state, what was done to each list, and every object written (removed
/// again on failure).
pub fn compact(
    env: &Env,
    node: &NodeView,
) -> Result<(NodeState, [PartsCompacted; 2], Vec<String>)> {
    if node.kind == Kind::Merge {
        return Err(Error::InvalidArgument(format!(
            "{:?} is a merge: it stores no parts",
            node.name
        )));
    }
    let mut created = Vec::new();
    let token = env.token();
    let base = format!("nodes/{}", node.name);
    let run = |created: &mut Vec<String>| -> Result<(NodeState, [PartsCompacted; 2])> {
        let (content, c) = compact_parts(
            &node.content_layout(env),
            &node.state.content,
            &format!("{base}/content/{token}"),
            created,
        )?;
        let (mappings, m) = if node.kind == Kind::Stage {
            compact_parts(
                &node.mappings_layout(env)?,
                &node.state.mappings,
                &format!("{base}/mappings/{token}"),
                created,
            )?
        } else {
            (node.state.mappings.clone(), PartsCompacted::default())
        };
        let state = NodeState {
            content,
            mappings,
            derived_prefix: node.state.derived_prefix,
            update: Default::default(),
        };
        Ok((state, [c, m]))
    };
    match run(&mut created) {
        Ok((state, done)) => Ok((state, done, created)),
        Err(e) => {
            let _ = crate::runtime::block_on(env.store.delete_many(&created));
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producers::run::tests::{env, it, keys, pairs, source_of, source_rows, source_view};
    use crate::producers::source;

    #[test]
    fn compaction_merges_patches_and_small_parts_and_keeps_the_rows() {
        let env = env(40);
        let s1 = source_of(&env, &(0..400).collect::<Vec<_>>());
        // A compact state: nothing to do, nothing written.
        let (same, done, made) = compact(&env, &source_view(s1.clone())).unwrap();
        assert_eq!(same.content, s1.content);
        assert!(made.is_empty() && done[0] == PartsCompacted::default());
        // Patch a few parts, and empty most of two neighbours (small parts).
        let (s2, _) = source::apply(
            &env,
            &source_view(s1.clone()),
            it(vec![pairs(&[5, 205], &["x", "y"])]),
            vec![keys(&(90..155).collect::<Vec<_>>())],
        )
        .unwrap();
        assert!(s2.content.iter().any(|p| !p.patches.is_empty()));
        let want = source_rows(&env, &s2);
        let (s3, done, made) = compact(&env, &source_view(s2.clone())).unwrap();
        assert_eq!(source_rows(&env, &s3), want, "the rows do not change");
        assert!(
            s3.content.iter().all(|p| p.patches.is_empty()),
            "no patch left"
        );
        assert!(s3.update.is_empty());
        assert!(done[0].rewritten > 0 && !made.is_empty());
        assert!(
            s3.content.len() < s2.content.len(),
            "{} parts, were {}",
            s3.content.len(),
            s2.content.len()
        );
        let kept = s3.content.iter().filter(|p| s2.content.contains(p)).count();
        assert!(kept > 0, "untouched parts are kept by reference");
        // Compacting again changes nothing.
        let (s4, _, made) = compact(&env, &source_view(s3.clone())).unwrap();
        assert_eq!(s4.content, s3.content);
        assert!(made.is_empty());
    }
}
