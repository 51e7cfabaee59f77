//! Writing a sorted stream as key-range Parquet parts.
//!
//! A part holds about `target_rows` rows and is cut at the next key
//! boundary, so that an update that touches some keys can rewrite just the
//! parts whose ranges hold them and keep the others by reference. A key
//! with more rows than that may *span* parts: a part is cut inside a run of
//! equal keys once it holds [`SPAN_FACTOR`] × `target_rows` rows, and the
//! next part starts with the same key. Parts sharing a key that way (part
//! `i`'s last key equals part `i + 1`'s first) form one *unit* (see
//! [`units`]): every reader and rewriter treats a unit as it treats one
//! part, so a group of any size is written, read and scanned part by part.
//! Each part's first and last key are recorded (as JSON values, see
//! [`crate::parquet::stats`]) with its rows, size and SHA-256.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use serde_json::Value;

use super::keys::KeyEncoder;
use super::BatchIter;

/// A part is cut inside a run of equal keys once it holds this many times
/// `target_rows` rows (see the module docs).
pub const SPAN_FACTOR: usize = 2;
use super::part_stream::{Feed, Outcomes, PartStages, PartTarget};
use crate::error::{Error, Result};
use crate::parquet::encode::EncodeOptions;
pub use crate::spec::pipeline::{Patch, RangePart};
use crate::store::StoreHandle;

impl Patch {
    /// The patch's files: rows, then deleted values.
    pub fn files(&self) -> impl Iterator<Item = &RangePart> {
        self.rows.iter().chain(self.deleted.iter())
    }

    /// The deleted values this patch holds: its run of a shared file, or
    /// its own file's rows.
    pub fn deleted_count(&self) -> u64 {
        match (self.deleted_rows, &self.deleted) {
            (Some([start, end]), _) => end.saturating_sub(start),
            (None, Some(f)) => f.rows,
            (None, None) => 0,
        }
    }

    /// Rows and deleted values this patch holds.
    pub fn held(&self) -> u64 {
        self.rows.as_ref().map_or(0, |f| f.rows) + self.deleted_count()
    }
}

impl RangePart {
    /// The length and CRC-32 of the file's tail (page index, footer,
    /// trailer) its record holds, if it holds them (parts written in
    /// `pds-pipeline/2`; the manifest's check has validated them).
    pub fn footer_check(&self) -> Option<(u64, u32)> {
        let f = self.footer.as_ref()?;
        Some((f.bytes, u32::from_str_radix(&f.crc32, 16).ok()?))
    }

    /// The rows of the part's own file (`rows` unless it has patches).
    pub fn file_rows(&self) -> u64 {
        self.base_rows.unwrap_or(self.rows)
    }

    /// Every object the part reads: its file, then its patches' files.
    pub fn objects(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.name.as_str()).chain(
            self.patches
                .iter()
                .flat_map(|p| p.files().map(|f| f.name.as_str())),
        )
    }
}

/// Where and how [`write_range_parts`] writes.
#[derive(Debug, Clone)]
pub struct PartSpec<'a> {
    /// The folder key the parts go under.
    pub location: &'a str,
    /// Parts are named `<prefix>-NNNNN.parquet`.
    pub prefix: &'a str,
    /// Rows per part, before the cut at the next key boundary (a key with
    /// more rows is cut at [`SPAN_FACTOR`] × `target_rows`).
    pub target_rows: usize,
    pub opts: &'a EncodeOptions,
}

/// Write `stream` (sorted by `key`) as key-range parts (see [`PartSpec`]),
/// cut at key boundaries, or inside a key whose rows fill a part (see the
/// module docs). Returns the parts in key order. On failure, the parts
/// already written are removed.
///
/// A part's rows are encoded as they are cut, on an encoder thread (its
/// columns in parallel on the CPU pool), and each finished part is
/// uploaded while the next is encoded (see [`super::part_stream`]): memory
/// is at most a few slices of rows, the encoded pages of the part being
/// cut and the bytes of the part being uploaded, whatever the part size.
/// The parts do not depend on the thread count.
pub fn write_range_parts(
    store: Arc<StoreHandle>,
    spec: &PartSpec<'_>,
    schema: SchemaRef,
    key: &[String],
    stream: BatchIter,
) -> Result<Vec<RangePart>> {
    write_range_parts_on(
        store,
        spec,
        schema,
        key,
        stream,
        super::sort::default_threads(),
    )
}

/// [`write_range_parts`] on `threads` threads (1: encode and upload on the
/// calling thread; see [`super::part_stream`]).
pub fn write_range_parts_on(
    store: Arc<StoreHandle>,
    spec: &PartSpec<'_>,
    schema: SchemaRef,
    key: &[String],
    stream: BatchIter,
    threads: usize,
) -> Result<Vec<RangePart>> {
    let PartSpec {
        location,
        prefix,
        target_rows,
        opts,
    } = *spec;
    if target_rows == 0 {
        return Err(Error::InvalidArgument("target_rows must be >= 1".into()));
    }
    crate::store::keys::object_segments(location)?;
    let max_rows = target_rows.saturating_mul(SPAN_FACTOR);
    let encoder = KeyEncoder::new(&schema, key)?;
    let target = PartTarget {
        store: store.clone(),
        folder: location.trim_end_matches('/').to_string(),
        prefix,
        schema,
        key,
        opts,
        max_rows,
    };
    let outcomes = Outcomes::default();
    let cut = std::thread::scope(|s| -> Result<()> {
        let mut stages = PartStages::start(s, &target, &outcomes, threads)?;
        let cut = cut_parts(&mut stages, stream, &encoder, target_rows, max_rows);
        if cut.is_err() {
            outcomes.cancel();
        }
        cut
        // Leaving the scope closes the channels and joins the stages.
    });
    let (written, err) = outcomes.finish(cut);
    if let Some(e) = err {
        let keys: Vec<String> = written.iter().map(|p| target.object(&p.name)).collect();
        let _ = crate::runtime::block_on(store.delete_many(&keys));
        return Err(e);
    }
    Ok(written)
}

/// Cut `stream` into parts and send their rows to `stages` (see
/// [`write_range_parts`]).
fn cut_parts(
    stages: &mut PartStages<'_, '_>,
    stream: BatchIter,
    encoder: &KeyEncoder,
    target_rows: usize,
    max_rows: usize,
) -> Result<()> {
    // The open part's rows so far, and its last slice (for its last key).
    let mut rows = 0usize;
    let mut last: Option<RecordBatch> = None;
    for batch in stream {
        let mut batch = batch?;
        while batch.num_rows() > 0 {
            if rows < target_rows {
                let take = (target_rows - rows).min(batch.num_rows());
                add(stages, &mut last, batch.slice(0, take))?;
                rows += take;
                batch = batch.slice(take, batch.num_rows() - take);
                continue;
            }
            // Full: keep the rows that share the last key (up to the
            // hard cap: then the key spans parts), then cut.
            let Some(tail) = last.take() else { break };
            let room = max_rows.saturating_sub(rows).min(batch.num_rows());
            let same = if room == 0 {
                0
            } else {
                let last_rows = encoder.rows(&tail)?;
                let boundary = last_rows.row(tail.num_rows() - 1).owned();
                let rows_here = encoder.rows(&batch.slice(0, room))?;
                (0..room)
                    .take_while(|&i| rows_here.row(i) == boundary.row())
                    .count()
            };
            last = Some(tail);
            if same > 0 {
                add(stages, &mut last, batch.slice(0, same))?;
                rows += same;
                batch = batch.slice(same, batch.num_rows() - same);
                if batch.num_rows() == 0 {
                    break; // The key may go on in the next batch.
                }
            }
            // Another key follows, or the part is at its hard cap.
            stages.send(Feed::Cut)?;
            rows = 0;
            last = None;
        }
    }
    if rows > 0 {
        stages.send(Feed::Cut)?;
    }
    Ok(())
}

/// Send the open part's next rows, kept as its `last` slice.
fn add(
    stages: &mut PartStages<'_, '_>,
    last: &mut Option<RecordBatch>,
    slice: RecordBatch,
) -> Result<()> {
    *last = Some(slice.clone());
    stages.send(Feed::Rows(slice))
}

/// Recorded keys (JSON values, one per key column) as arrays, one per
/// column of `fields`. `InvalidArgument` for a key type without recorded
/// ranges; a missing value is a null.
pub fn json_key_columns(
    keys: &[&[Option<Value>]],
    fields: &[&arrow_schema::Field],
) -> Result<Vec<arrow_array::ArrayRef>> {
    let mut columns = Vec::with_capacity(fields.len());
    for (n, field) in fields.iter().enumerate() {
        let values: Vec<Option<&Value>> = keys
            .iter()
            .map(|k| k.get(n).and_then(|v| v.as_ref()))
            .collect();
        let array =
            crate::parquet::stats::from_json(&values, field.data_type()).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "key column {:?} of type {} has no recorded ranges",
                    field.name(),
                    field.data_type()
                ))
            })?;
        columns.push(array);
    }
    Ok(columns)
}

/// The parts' first (`last == false`) or last keys (`key` columns of
/// `key_schema`) as rows of the key's row format, one per part.
/// `InvalidArgument` for a key type without recorded ranges.
fn key_rows(
    parts: &[RangePart],
    key_schema: &SchemaRef,
    key: &[String],
    last: bool,
) -> Result<arrow_row::Rows> {
    let idx = crate::parquet::decode::column_indices(key_schema, key)?;
    let fields: Vec<&arrow_schema::Field> = idx.iter().map(|&i| key_schema.field(i)).collect();
    let keys: Vec<&[Option<Value>]> = parts
        .iter()
        .map(|p| {
            if last {
                p.last_key.as_slice()
            } else {
                p.first_key.as_slice()
            }
        })
        .collect();
    let columns = json_key_columns(&keys, &fields)?;
    let batch = RecordBatch::try_new(
        Arc::new(arrow_schema::Schema::new(
            idx.iter()
                .map(|&i| key_schema.field(i).clone().with_nullable(true))
                .collect::<Vec<_>>(),
        )),
        columns,
    )?;
    KeyEncoder::new(&batch.schema(), key)?.rows(&batch)
}

/// The parts' last keys (`key` columns of `key_schema`) as rows of the
/// key's row format, one per part. `InvalidArgument` for a key type
/// without recorded ranges.
pub fn last_key_rows(
    parts: &[RangePart],
    key_schema: &SchemaRef,
    key: &[String],
) -> Result<arrow_row::Rows> {
    key_rows(parts, key_schema, key, true)
}

/// The parts' first and last keys as rows (see [`last_key_rows`]),
/// checked: in key order, each part's first key at most its last, and no
/// two parts overlapping except where they share a boundary key (a key
/// spanning parts). Part records come from a store: anything else is
/// `ManifestCorrupted`.
pub fn key_bounds(
    parts: &[RangePart],
    key_schema: &SchemaRef,
    key: &[String],
) -> Result<(arrow_row::Rows, arrow_row::Rows)> {
    let firsts = key_rows(parts, key_schema, key, false)?;
    let lasts = key_rows(parts, key_schema, key, true)?;
    let corrupted = |p: &RangePart, reason: &str| Error::ManifestCorrupted {
        path: p.name.clone(),
        reason: reason.to_string(),
    };
    for (j, p) in parts.iter().enumerate() {
        if firsts.row(j) > lasts.row(j) {
            return Err(corrupted(p, "its first key is past its last key"));
        }
        if j + 1 < parts.len() && lasts.row(j) > firsts.row(j + 1) {
            return Err(corrupted(
                &parts[j + 1],
                "it overlaps the part before it beyond a shared boundary key: \
                 parts must be in key order",
            ));
        }
    }
    Ok((firsts, lasts))
}

/// The parts (in key order) grouped into *units*: runs of consecutive
/// parts where each shares its last key with the next one's first (a key
/// spanning parts; see the module docs). Every other part is a unit of its
/// own. A change to a key rewrites its whole unit. `ManifestCorrupted` for
/// parts out of order (see [`key_bounds`]). No I/O.
pub fn units(
    parts: &[RangePart],
    key_schema: &SchemaRef,
    key: &[String],
) -> Result<Vec<std::ops::Range<usize>>> {
    let (firsts, lasts) = key_bounds(parts, key_schema, key)?;
    let mut out = Vec::new();
    let mut start = 0;
    for j in 0..parts.len() {
        if j + 1 == parts.len() || lasts.row(j) != firsts.row(j + 1) {
            out.push(start..j + 1);
            start = j + 1;
        }
    }
    Ok(out)
}

/// Which of `parts` (in key order, from [`write_range_parts`]) an update
/// touching the keys in `touched` must rewrite; the others are kept by
/// reference. A key inside a part's range touches that part, and every
/// following part it spans into; a key between two parts' ranges (a new
/// key) touches the next part, or the last part if it is beyond them all.
/// `key_schema` holds the key columns' types; `touched` batches hold (at
/// least) the key columns. `key` must be the key the parts were cut at (or
/// leading columns of their sort key, if no value of those columns spans
/// parts other than through shared boundary keys). `ManifestCorrupted` for
/// parts out of order.
///
/// Cost: a binary search per touched key over the parts' ranges; no I/O.
pub fn touched_parts(
    parts: &[RangePart],
    key_schema: &SchemaRef,
    key: &[String],
    touched: &[RecordBatch],
) -> Result<Vec<bool>> {
    let mut hit = vec![false; parts.len()];
    if parts.is_empty() {
        return Ok(hit);
    }
    let encoder = KeyEncoder::new(key_schema, key)?;
    let (first_rows, last_rows) = key_bounds(parts, key_schema, key)?;
    for batch in touched {
        let rows = encoder.rows(batch)?;
        for i in 0..batch.num_rows() {
            let r = rows.row(i);
            // The first part whose last key is >= the touched key.
            let (mut lo, mut hi) = (0, parts.len());
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if last_rows.row(mid) < r {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            let mut j = lo.min(parts.len() - 1);
            hit[j] = true;
            // The key may go on into the parts after (sharing it).
            while j + 1 < parts.len() && first_rows.row(j + 1) <= r {
                j += 1;
                hit[j] = true;
            }
        }
    }
    Ok(hit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producers::sort::tests::{batch, collect, schema};
    use crate::producers::sort::ExternalSorter;
    use std::collections::BTreeMap;

    #[test]
    fn parts_are_cut_at_key_boundaries_and_record_their_ranges() {
        let key = vec!["k".to_string()];
        let mut s = ExternalSorter::new(schema(), &key, 1 << 30, None).unwrap();
        for i in 0..5 {
            s.push(batch(i * 1000, 1000, 17 + i as u64)).unwrap();
        }
        // Re-batch into small batches so that keys cross batch edges.
        let sorted: BatchIter = Box::new(s.finish().unwrap().flat_map(|b| {
            let b = b.unwrap();
            (0..b.num_rows())
                .step_by(3)
                .map(|i| Ok(b.slice(i, 3.min(b.num_rows() - i))))
                .collect::<Vec<_>>()
        }));
        let store = Arc::new(StoreHandle::open("memory://", &BTreeMap::new()).unwrap());
        let opts = EncodeOptions::new("zstd", None, None).unwrap();
        let spec = PartSpec {
            location: "st/content",
            prefix: "p",
            target_rows: 400,
            opts: &opts,
        };
        let parts = write_range_parts(store.clone(), &spec, schema(), &key, sorted).unwrap();
        assert!(parts.len() >= 10, "{} parts", parts.len());
        assert_eq!(parts.iter().map(|p| p.rows).sum::<u64>(), 5000);
        let mut all = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            assert!(p.rows >= 400 || i == parts.len() - 1, "cut early: {p:?}");
            let data = crate::runtime::block_on(store.get(&format!("st/content/{}", p.name)))
                .unwrap()
                .unwrap();
            let d =
                crate::parquet::decode::decode_bytes(data, &p.name, &Default::default()).unwrap();
            let rows = collect(Box::new(d.batches.into_iter().map(Ok)));
            assert_eq!(
                rows.first().map(|r| r.0.map(Value::from)),
                Some(p.first_key[0].clone())
            );
            assert_eq!(
                rows.last().map(|r| r.0.map(Value::from)),
                Some(p.last_key[0].clone())
            );
            all.extend(rows);
        }
        // No key in two parts.
        for w in parts.windows(2) {
            assert_ne!(w[0].last_key, w[1].first_key, "a key spans two parts");
        }
        let keys: Vec<Option<i64>> = all.iter().map(|r| r.0).collect();
        let mut sorted_keys = keys.clone();
        sorted_keys.sort();
        assert_eq!(keys, sorted_keys);
    }

    fn sorted_input() -> Vec<RecordBatch> {
        let key = vec!["k".to_string()];
        let mut s = ExternalSorter::new(schema(), &key, 1 << 30, None).unwrap();
        for i in 0..8 {
            s.push(batch(i * 1000, 1000, 5 + i as u64)).unwrap();
        }
        s.finish().unwrap().map(|b| b.unwrap()).collect()
    }

    /// Parts of about 300 rows under `st/content`.
    fn small_parts(opts: &EncodeOptions) -> PartSpec<'_> {
        PartSpec {
            location: "st/content",
            prefix: "p",
            target_rows: 300,
            opts,
        }
    }

    /// The same parts (names, ranges, bytes) on 1, 2 and 4 threads.
    #[test]
    fn parts_are_identical_for_any_thread_count() {
        let key = vec!["k".to_string()];
        let opts = EncodeOptions::new("zstd", None, None).unwrap();
        let spec = small_parts(&opts);
        let mut all = Vec::new();
        for threads in [1, 2, 4] {
            let store = Arc::new(StoreHandle::open("memory://", &BTreeMap::new()).unwrap());
            let input: BatchIter = Box::new(sorted_input().into_iter().map(Ok));
            let parts = write_range_parts_on(store, &spec, schema(), &key, input, threads).unwrap();
            assert!(parts.len() > 10);
            all.push(parts);
        }
        assert_eq!(all[0], all[1]);
        assert_eq!(all[0], all[2]);
    }

    /// A stream failing after some parts: the error, and no part left.
    #[test]
    fn a_failing_stream_leaves_no_part_on_any_thread_count() {
        let key = vec!["k".to_string()];
        let opts = EncodeOptions::new("zstd", None, None).unwrap();
        let spec = small_parts(&opts);
        for threads in [1, 3] {
            let store = Arc::new(StoreHandle::open("memory://", &BTreeMap::new()).unwrap());
            let mut input: Vec<Result<RecordBatch>> = sorted_input().into_iter().map(Ok).collect();
            input.truncate(input.len() / 2);
            input.push(Err(Error::Task("boom".into())));
            let got = write_range_parts_on(
                store.clone(),
                &spec,
                schema(),
                &key,
                Box::new(input.into_iter()),
                threads,
            );
            assert!(matches!(got, Err(Error::Task(m)) if m == "boom"));
            let left = crate::runtime::block_on(store.list("st", true))
                .unwrap()
                .unwrap();
            assert!(left.objects.is_empty(), "{threads} threads left some parts");
        }
    }

    /// Fails the PUTs of part `n`'s object as `outcome` says: every one
    /// refused (retries included), or the first applied with its reply
    /// lost.
    struct FailNthPart {
        n: usize,
        outcome: crate::store::hooked::Outcome,
        puts: std::sync::atomic::AtomicUsize,
    }

    impl crate::store::hooked::Hook for FailNthPart {
        fn on(
            &self,
            op: crate::store::hooked::Op,
            path: Option<&object_store::path::Path>,
            _: &object_store::memory::InMemory,
        ) -> crate::store::hooked::Outcome {
            use crate::store::hooked::{Op, Outcome};
            let name = format!("p-{:05}.parquet", self.n);
            if op != Op::Put || !path.is_some_and(|p| p.as_ref().ends_with(&name)) {
                return Outcome::Forward;
            }
            let seen = self.puts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            match self.outcome {
                Outcome::LoseReply if seen > 0 => Outcome::Forward,
                outcome => outcome,
            }
        }
    }

    #[test]
    fn a_failed_upload_leaves_no_part_and_a_lost_reply_keeps_it_once() {
        use crate::store::hooked::{Hooked, Outcome};
        let key = vec!["k".to_string()];
        let opts = EncodeOptions::new("zstd", None, None).unwrap();
        let spec = small_parts(&opts);
        let clean = {
            let store = Arc::new(StoreHandle::open("memory://", &BTreeMap::new()).unwrap());
            let input: BatchIter = Box::new(sorted_input().into_iter().map(Ok));
            write_range_parts(store, &spec, schema(), &key, input).unwrap()
        };
        assert!(clean.len() > 2);
        for outcome in [Outcome::Fail, Outcome::LoseReply] {
            for threads in [1, 2, 3] {
                for n in [0, 2] {
                    let hooked = Hooked::new(FailNthPart {
                        n,
                        outcome,
                        puts: Default::default(),
                    });
                    let store =
                        Arc::new(StoreHandle::from_object_store(Arc::new(hooked), "").unwrap());
                    let input: BatchIter = Box::new(sorted_input().into_iter().map(Ok));
                    let got =
                        write_range_parts_on(store.clone(), &spec, schema(), &key, input, threads);
                    let what = format!("{outcome:?}, part {n}, {threads} threads");
                    let left = crate::runtime::block_on(store.list("st", true))
                        .unwrap()
                        .unwrap();
                    if outcome == Outcome::LoseReply {
                        // The PUT was applied: found there with its bytes,
                        // the part is kept, once.
                        let parts = got.expect(&what);
                        assert_eq!(parts, clean, "{what}");
                        assert_eq!(left.objects.len(), parts.len(), "{what}");
                        continue;
                    }
                    let err = got.expect_err(&what);
                    assert!(err.to_string().contains("injected"), "{what}: {err}");
                    assert!(left.objects.is_empty(), "{what} left {:?}", left.objects);
                }
            }
        }
    }

    #[test]
    fn updates_touch_only_the_parts_holding_their_keys() {
        let key = vec!["k".to_string()];
        let key_schema = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "k",
            arrow_schema::DataType::Int64,
            true,
        )]));
        let part = |first: i64, last: i64| RangePart {
            name: format!("p{first}"),
            rows: 1,
            size_bytes: 1,
            sha256: String::new(),
            first_key: vec![Some(Value::from(first))],
            last_key: vec![Some(Value::from(last))],
            patches: Vec::new(),
            base_rows: None,
            footer: None,
        };
        let parts = vec![part(0, 99), part(100, 199), part(250, 300)];
        let keys = |ks: &[i64]| {
            vec![RecordBatch::try_new(
                key_schema.clone(),
                vec![Arc::new(arrow_array::Int64Array::from(ks.to_vec())) as arrow_array::ArrayRef],
            )
            .unwrap()]
        };
        let touched = |ks: &[i64]| touched_parts(&parts, &key_schema, &key, &keys(ks)).unwrap();
        assert_eq!(touched(&[]), [false, false, false]);
        assert_eq!(touched(&[5]), [true, false, false]);
        assert_eq!(touched(&[99, 100]), [true, true, false]);
        assert_eq!(
            touched(&[220]),
            [false, false, true],
            "a new key in a gap: the next part"
        );
        assert_eq!(
            touched(&[10_000]),
            [false, false, true],
            "beyond the last: the last part"
        );
        assert_eq!(touched(&[-5]), [true, false, false]);
    }

    /// A key with more rows than a part holds spans parts: each part is
    /// capped, neighbours share their boundary key, [`units`] groups them,
    /// and a touched key touches every part it spans.
    #[test]
    fn a_long_key_spans_capped_parts() {
        let key = vec!["k".to_string()];
        let ks: Vec<i64> = (0..5)
            .chain(std::iter::repeat_n(7, 100))
            .chain(8..12)
            .collect();
        let b = RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(arrow_array::Int64Array::from(ks.clone())),
                Arc::new(arrow_array::StringArray::from(vec!["x"; ks.len()])),
                Arc::new(arrow_array::Int64Array::from(vec![1i64; ks.len()])),
            ],
        )
        .unwrap();
        // Batches of 7 rows, so that runs cross batch edges.
        let batches: Vec<Result<RecordBatch>> = (0..b.num_rows())
            .step_by(7)
            .map(|i| Ok(b.slice(i, 7.min(b.num_rows() - i))))
            .collect();
        let store = Arc::new(StoreHandle::open("memory://", &BTreeMap::new()).unwrap());
        let opts = EncodeOptions::new("zstd", None, None).unwrap();
        let spec = PartSpec {
            location: "st/content",
            prefix: "p",
            target_rows: 10,
            opts: &opts,
        };
        let parts =
            write_range_parts(store, &spec, schema(), &key, Box::new(batches.into_iter())).unwrap();
        assert_eq!(parts.iter().map(|p| p.rows).sum::<u64>(), ks.len() as u64);
        assert!(parts.iter().all(|p| p.rows <= 20), "{parts:?}");
        let seven = Some(Value::from(7));
        let spanning = parts
            .iter()
            .filter(|p| p.first_key[0] == seven || p.last_key[0] == seven)
            .count();
        assert!(spanning >= 5, "{spanning} parts hold key 7");
        let us = units(&parts, &schema(), &key).unwrap();
        assert_eq!(us.iter().map(|u| u.len()).sum::<usize>(), parts.len());
        let wide = us.iter().find(|u| u.len() > 1).unwrap();
        assert_eq!(wide.len(), spanning);
        let probe = |k: i64| {
            let kb = RecordBatch::try_new(
                Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
                    "k",
                    arrow_schema::DataType::Int64,
                    false,
                )])),
                vec![Arc::new(arrow_array::Int64Array::from(vec![k]))],
            )
            .unwrap();
            touched_parts(&parts, &schema(), &key, &[kb]).unwrap()
        };
        let hit: Vec<usize> = (0..parts.len()).filter(|&j| probe(7)[j]).collect();
        assert_eq!(hit, wide.clone().collect::<Vec<_>>());
        assert_eq!(probe(11).iter().filter(|h| **h).count(), 1);
        // Records that overlap without sharing a key are refused.
        let mut bad = parts.clone();
        bad.swap(0, parts.len() - 1);
        assert!(matches!(
            units(&bad, &schema(), &key),
            Err(Error::ManifestCorrupted { .. })
        ));
        let mut inverted = parts.clone();
        inverted[0].first_key = vec![Some(Value::from(1000))];
        assert!(matches!(
            touched_parts(&inverted, &schema(), &key, &[]),
            Err(Error::ManifestCorrupted { .. })
        ));
    }
}
