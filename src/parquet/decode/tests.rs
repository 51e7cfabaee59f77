//! Tests of decoding: projections, selections, filters, footers and damage.

use arrow_array::ArrayRef;
use parquet::arrow::arrow_reader::{RowSelection, RowSelector};

use super::post_filter::batch_bounds;
use super::*;
use crate::parquet::encode::{encode_to_bytes, EncodeOptions};
use crate::store::StoreHandle;
use arrow_array::{Int64Array, StringArray};
use arrow_schema::{DataType, Field};

fn sample() -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int64, false),
        Field::new("b", DataType::Utf8, true),
        Field::new("c", DataType::Int64, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(vec![1, 2, 3])),
            Arc::new(StringArray::from(vec!["x", "y", "z"])),
            Arc::new(Int64Array::from(vec![7, 8, 9])),
        ],
    )
    .unwrap()
}

/// `b` encoded as one zstd part.
fn encoded(b: &RecordBatch) -> Bytes {
    encoded_with(b, "zstd", None)
}

/// `b` encoded as one part with `codec`, `group` rows a row group.
fn encoded_with(b: &RecordBatch, codec: &str, group: Option<usize>) -> Bytes {
    let opts = EncodeOptions::new(codec, group, None).unwrap();
    encode_to_bytes(std::slice::from_ref(b), b.schema(), &opts)
        .unwrap()
        .0
}

#[test]
fn projection_keeps_caller_order() {
    let b = sample();
    let bytes = encoded(&b);
    let opts = ReadOptions {
        columns: Some(vec!["c".into(), "a".into()]),
        ..Default::default()
    };
    let d = decode_bytes(bytes, "p", &opts).unwrap();
    let names: Vec<&str> = d
        .schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(names, ["c", "a"]);
    assert_eq!(d.batches[0], b.project(&[2, 0]).unwrap());
}

/// A part that is not the size its reader was told (empty, cut short,
/// grown) is `PartCorrupted`, never a store error or a right-looking read.
#[test]
fn a_part_of_another_size_than_recorded_is_corrupted() {
    let b = sample();
    let bytes = encoded(&b);
    let store = StoreHandle::open("memory://", &Default::default()).unwrap();
    let rt = crate::runtime::get().unwrap();
    let size = bytes.len() as u64;
    let mut grown = bytes.to_vec();
    grown.extend_from_slice(&[0u8; 100]);
    for (name, stored) in [
        ("empty", Bytes::new()),
        ("short", bytes.slice(0..bytes.len() - 1)),
        ("half", bytes.slice(0..bytes.len() / 2)),
        ("grown", Bytes::from(grown)),
    ] {
        rt.block_on(store.put(name, stored, crate::store::PutMode::Overwrite))
            .unwrap();
        match rt.block_on(read_part(&store, name, size, &ReadOptions::default())) {
            Err(Error::PartCorrupted { path, reason }) => {
                assert_eq!(path, name);
                assert!(reason.contains("recorded"), "{name}: {reason}");
            }
            other => panic!("{name}: {:?}", other.map(|d| d.file_rows)),
        }
    }
    rt.block_on(store.put("exact", bytes, crate::store::PutMode::Overwrite))
        .unwrap();
    let d = rt
        .block_on(read_part(&store, "exact", size, &ReadOptions::default()))
        .unwrap();
    assert_eq!(d.file_rows, 3);
}

#[test]
fn unknown_column_and_garbage_are_reported() {
    let b = sample();
    let bytes = encoded(&b);
    let opts = ReadOptions {
        columns: Some(vec!["nope".into()]),
        ..Default::default()
    };
    assert!(matches!(
        decode_bytes(bytes.clone(), "p", &opts),
        Err(Error::InvalidArgument(_))
    ));
    let truncated = bytes.slice(0..bytes.len() / 2);
    assert!(matches!(
        decode_bytes(truncated, "p", &ReadOptions::default()),
        Err(Error::PartCorrupted { .. })
    ));
    assert!(matches!(
        decode_bytes(
            Bytes::from_static(b"hello, not parquet"),
            "p",
            &ReadOptions::default()
        ),
        Err(Error::PartCorrupted { .. })
    ));
}

/// A seeded fuzz loop over damaged parts: every outcome is the original
/// data or `PartCorrupted`; never a panic, never different rows.
#[test]
fn damaged_bytes_decode_equal_or_fail_as_corruption() {
    let b = sample();
    let schema = b.schema();
    for codec in ["zstd", "snappy", "none", "gzip", "lz4", "brotli"] {
        let bytes = encoded_with(&b, codec, Some(2));
        let mut rng = crate::test_rng::TestRng::new(0x9e37_79b9_7f4a_7c15 ^ bytes.len() as u64);
        let mut next = move || rng.next_u64();
        for _ in 0..150 {
            let mut damaged = bytes.to_vec();
            match next() % 4 {
                0 => {
                    let at = (next() % damaged.len() as u64) as usize;
                    damaged[at] ^= 1 << (next() % 8);
                }
                1 => damaged.truncate((next() % damaged.len() as u64) as usize),
                2 => {
                    // Overwrite the footer length (the 4 bytes before "PAR1").
                    let n = damaged.len();
                    damaged[n - 8..n - 4].copy_from_slice(&(next() as u32).to_le_bytes());
                }
                _ => {
                    let at = (next() % (damaged.len() as u64 - 4)) as usize;
                    damaged[at..at + 4].copy_from_slice(&(next() as u32).to_le_bytes());
                }
            }
            let opts = ReadOptions {
                expected: Some(schema.clone()),
                ..Default::default()
            };
            match decode_bytes(Bytes::from(damaged), "p", &opts) {
                Ok(d) => {
                    let all = arrow_select::concat::concat_batches(&d.schema, &d.batches).unwrap();
                    assert_eq!(all, b, "{codec}: damaged bytes decoded to other data");
                }
                Err(Error::PartCorrupted { .. }) => {}
                Err(other) => panic!("{codec}: unexpected error {other}"),
            }
        }
    }
}

#[test]
fn a_flipped_bit_in_any_column_chunk_is_corruption() {
    let b = sample();
    let bytes = encoded_with(&b, "none", Some(2));
    let metadata = ArrowReaderMetadata::load(&bytes, Default::default()).unwrap();
    let sums = crate::parquet::chunk_crc::ChunkChecksums::from_metadata(metadata.metadata())
        .unwrap()
        .expect("pds writes chunk checksums");
    sums.check_all(&bytes).unwrap();
    for rg in metadata.metadata().row_groups() {
        for c in rg.columns() {
            let (start, len) = c.byte_range();
            let mut damaged = bytes.to_vec();
            damaged[(start + len / 2) as usize] ^= 0x10;
            assert!(matches!(
                decode_bytes(Bytes::from(damaged), "p", &ReadOptions::default()),
                Err(Error::PartCorrupted { .. })
            ));
        }
    }
}

#[test]
fn row_groups_select_and_combine_with_pruning() {
    let b = sample();
    let bytes = encoded_with(&b, "zstd", Some(1));
    let a_values = |d: Decoded| -> Vec<i64> {
        d.batches
            .iter()
            .flat_map(|b| {
                let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                a.values().to_vec()
            })
            .collect()
    };
    let only = |row_groups: Vec<usize>| ReadOptions {
        row_groups: Some(row_groups),
        ..Default::default()
    };
    assert_eq!(
        a_values(decode_bytes(bytes.clone(), "p", &only(vec![1])).unwrap()),
        [2]
    );
    let pred = crate::parquet::filter::predicate(vec![(
        "a".into(),
        ">=".into(),
        Some(Arc::new(Int64Array::from(vec![2])) as arrow_array::ArrayRef),
    )])
    .unwrap();
    let both = ReadOptions {
        predicate: Some(Arc::new(pred)),
        ..only(vec![0, 2])
    };
    assert_eq!(
        a_values(decode_bytes(bytes.clone(), "p", &both).unwrap()),
        [3]
    );
    assert!(matches!(
        decode_bytes(bytes, "p", &only(vec![3])),
        Err(Error::InvalidArgument(_))
    ));
}

/// A file of `n` rows (a = 0..n, b = "s<a % 5>", c = a or null every
/// 7th), in row groups of `group` rows.
fn numbered(n: i64, group: usize) -> Bytes {
    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int64, false),
        Field::new("b", DataType::Utf8, false),
        Field::new("c", DataType::Int64, true),
    ]));
    let b = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..n)),
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("s{}", i % 5)),
            )),
            Arc::new(Int64Array::from_iter(
                (0..n).map(|i| (i % 7 != 0).then_some(i)),
            )),
        ],
    )
    .unwrap();
    let opts = EncodeOptions::new("zstd", Some(group), None).unwrap();
    encode_to_bytes(std::slice::from_ref(&b), schema, &opts)
        .unwrap()
        .0
}

fn column_a(d: &Decoded) -> Vec<i64> {
    d.batches
        .iter()
        .flat_map(|b| {
            let i = b.schema().index_of("a").unwrap();
            let a = b.column(i).as_any().downcast_ref::<Int64Array>().unwrap();
            a.values().to_vec()
        })
        .collect()
}

/// Column `a` of the file read as `opts` in pieces starting at `cuts`
/// (the last piece to the end), concatenated.
fn in_pieces(bytes: &Bytes, opts: &ReadOptions, cuts: &[u64]) -> Vec<i64> {
    let mut got = Vec::new();
    for (i, w) in cuts.windows(2).enumerate() {
        let end = if i + 2 == cuts.len() { u64::MAX } else { w[1] };
        let piece = ReadOptions {
            rows: Some(w[0]..end),
            ..opts.clone()
        };
        got.extend(column_a(&decode_bytes(bytes.clone(), "p", &piece).unwrap()));
    }
    got
}

fn range_on(column: &str, lo: i64, hi: i64) -> Arc<Predicate> {
    let v = |x: i64| Some(Arc::new(Int64Array::from(vec![x])) as ArrayRef);
    Arc::new(
        crate::parquet::filter::predicate(vec![
            (column.into(), ">=".into(), v(lo)),
            (column.into(), "<=".into(), v(hi)),
        ])
        .unwrap(),
    )
}

/// Row ranges (pieces) partition a read: with scattered or clustered
/// positions (dropped after decoding, or skipped by the decoder), key
/// ranges dropped after decoding (on a column not projected, and on a
/// nullable one), row groups skipped, and a predicate, the pieces'
/// rows, in order, are the whole read's, which are the model's.
#[test]
fn pieces_and_late_deletes_partition_a_read() {
    let n = 1000i64;
    let bytes = numbered(n, 300);
    let scattered: Vec<u64> = (0..n as u64).filter(|i| i % 3 == 1).collect();
    let clustered: Vec<u64> = (100..400).chain(950..960).collect();
    // (dropped positions, key-range excludes, skip row group 1, filter b != "s0")
    type Case = (Option<Vec<u64>>, Vec<Arc<Predicate>>, bool, bool);
    let cases: Vec<Case> = vec![
        (Some(scattered.clone()), vec![], false, false),
        (Some(clustered.clone()), vec![], false, false),
        (None, vec![range_on("a", 250, 640)], false, false),
        (
            Some(scattered.clone()),
            vec![range_on("c", 500, 800)],
            false,
            false,
        ),
        (Some(scattered), vec![range_on("a", 10, 20)], true, false),
        (Some(clustered), vec![range_on("a", 700, 1200)], false, true),
    ];
    for (positions, exclude, skip_group, filtered) in cases {
        let dropped = |i: i64| {
            positions.as_ref().is_some_and(|p| p.contains(&(i as u64)))
                || exclude.iter().any(|e| {
                    let col = &e.conditions[0].column;
                    let v = if col == "c" && i % 7 == 0 {
                        None
                    } else {
                        Some(i)
                    };
                    let lo = e.conditions[0].values.as_ref().unwrap();
                    let hi = e.conditions[1].values.as_ref().unwrap();
                    let at =
                        |a: &ArrayRef| a.as_any().downcast_ref::<Int64Array>().unwrap().value(0);
                    v.is_some_and(|v| at(lo) <= v && v <= at(hi))
                })
                || (skip_group && (300..600).contains(&i))
                || (filtered && i % 5 == 0)
        };
        let model: Vec<i64> = (0..n).filter(|&i| !dropped(i)).collect();
        let base = ReadOptions {
            columns: Some(vec!["b".into()]),
            batch_size: Some(64),
            positions: positions.clone().map(|p| Positions::Drop(Arc::new(p))),
            exclude: exclude.clone(),
            skip_row_groups: skip_group.then(|| Arc::new(std::iter::once(1u64).collect())),
            predicate: filtered.then(|| {
                Arc::new(
                    crate::parquet::filter::predicate(vec![(
                        "b".into(),
                        "!=".into(),
                        Some(Arc::new(StringArray::from(vec!["s0"])) as ArrayRef),
                    )])
                    .unwrap(),
                )
            }),
            ..Default::default()
        };
        let with_a = ReadOptions {
            columns: Some(vec!["b".into(), "a".into()]),
            ..base.clone()
        };
        let whole = decode_bytes(bytes.clone(), "p", &with_a).unwrap();
        assert_eq!(column_a(&whole), model);
        // Without the key column the excluded rows still go, and only
        // the asked columns come out.
        let narrow = decode_bytes(bytes.clone(), "p", &base).unwrap();
        assert_eq!(narrow.schema.field(0).name(), "b");
        let b_values: Vec<String> = narrow
            .batches
            .iter()
            .flat_map(|b| {
                assert_eq!(b.num_columns(), 1);
                let s = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
                s.iter().map(|v| v.unwrap().to_string()).collect::<Vec<_>>()
            })
            .collect();
        let expected: Vec<String> = model.iter().map(|i| format!("s{}", i % 5)).collect();
        assert_eq!(b_values, expected);
        for cuts in [
            vec![0, 1000],
            vec![0, 150, 300, 301, 999],
            vec![0, 1, 2, 700],
        ] {
            assert_eq!(in_pieces(&bytes, &with_a, &cuts), model, "cuts {cuts:?}");
        }
    }
}

/// Kept positions with a row range, and a predicate whose statistics
/// prune row groups, read in pieces.
#[test]
fn pieces_keep_positions_and_prune_row_groups() {
    let bytes = numbered(1000, 300);
    let keep: Vec<u64> = vec![0, 5, 299, 300, 301, 650, 999];
    let v = |x: i64| Some(Arc::new(Int64Array::from(vec![x])) as ArrayRef);
    let at_least = |x: i64| {
        Arc::new(crate::parquet::filter::predicate(vec![("a".into(), ">=".into(), v(x))]).unwrap())
    };
    let cases: Vec<(ReadOptions, Vec<i64>)> = vec![
        (
            ReadOptions {
                positions: Some(Positions::Keep(Arc::new(keep.clone()))),
                ..Default::default()
            },
            keep.iter().map(|&p| p as i64).collect(),
        ),
        (
            ReadOptions {
                predicate: Some(at_least(610)), // Prunes row groups 0 and 1.
                positions: Some(Positions::Drop(Arc::new((0..1000).step_by(2).collect()))),
                ..Default::default()
            },
            (610..1000).filter(|i| i % 2 == 1).collect(),
        ),
    ];
    for (opts, model) in cases {
        for cuts in [vec![0, 1000], vec![0, 301, 640, 900], vec![0, 1, 999]] {
            assert_eq!(in_pieces(&bytes, &opts, &cuts), model, "cuts {cuts:?}");
        }
    }
}

/// A selection built as a bitmap selects the rows the same selection
/// built as runs does (the runs are for footers claiming more rows than
/// a bitmap should hold); scattered positions are kept the same way.
#[test]
fn bitmap_and_run_selections_agree() {
    let group_rows = [300u64, 300, 300, 100];
    let starts = group_starts(&group_rows);
    let expand = |s: RowSelection| -> Vec<bool> {
        Vec::<RowSelector>::from(s)
            .into_iter()
            .flat_map(|r| std::iter::repeat_n(!r.skip, r.row_count))
            .collect()
    };
    let listed: Vec<u64> = (0..1000)
        .filter(|i| i % 3 == 0 || (400..470).contains(i))
        .collect();
    for positions in [
        None,
        Some(Positions::Drop(Arc::new(listed.clone()))),
        Some(Positions::Keep(Arc::new(listed.clone()))),
    ] {
        for range in [None, Some(0..1000), Some(250..610), Some(999..u64::MAX)] {
            for groups in [vec![0, 1, 2, 3], vec![1, 3]] {
                let runs = row_selection(
                    positions.as_ref(),
                    range.as_ref(),
                    &starts,
                    &group_rows,
                    &groups,
                    0,
                );
                let bits = row_selection(
                    positions.as_ref(),
                    range.as_ref(),
                    &starts,
                    &group_rows,
                    &groups,
                    MASK_ROWS,
                );
                let (runs, bits) = (expand(runs), expand(bits));
                let total: u64 = groups.iter().map(|&g| group_rows[g]).sum();
                // A selection may end early (no trailing skip).
                let pad = |mut v: Vec<bool>| {
                    v.resize(total as usize, false);
                    v
                };
                assert_eq!(pad(runs), pad(bits.clone()));
                if let Some(Positions::Drop(p)) = &positions {
                    let by_range = pad(expand(row_selection(
                        None,
                        range.as_ref(),
                        &starts,
                        &group_rows,
                        &groups,
                        MASK_ROWS,
                    )));
                    // What kept_rows keeps is what the selection selects
                    // within the range (it covers only the range's rows).
                    if let Some(k) =
                        kept_rows(p, range.as_ref(), &starts, &group_rows, &groups, MASK_ROWS)
                    {
                        let within: Vec<bool> = pad(bits)
                            .into_iter()
                            .zip(&by_range)
                            .filter(|(_, r)| **r)
                            .map(|(b, _)| b)
                            .collect();
                        assert_eq!(k.mask.iter().collect::<Vec<_>>(), within);
                    }
                    // Above the bitmap's limit: no bitmap.
                    let in_range = by_range.iter().filter(|r| **r).count();
                    let small = kept_rows(p, range.as_ref(), &starts, &group_rows, &groups, 10);
                    assert!(small.is_none() || in_range <= 10);
                }
            }
        }
    }
}

#[test]
fn batch_bounds_cover_integers_dates_and_timestamps_only() {
    let ints: ArrayRef = Arc::new(Int64Array::from(vec![Some(5), None, Some(-3), Some(9)]));
    let (lo, hi) = batch_bounds(&ints).unwrap();
    assert_eq!(
        lo.as_ref(),
        &Int64Array::from(vec![-3]) as &dyn arrow_array::Array
    );
    assert_eq!(
        hi.as_ref(),
        &Int64Array::from(vec![9]) as &dyn arrow_array::Array
    );
    let ts: ArrayRef =
        Arc::new(arrow_array::TimestampMicrosecondArray::from(vec![3, 1]).with_timezone("UTC"));
    let (lo, _) = batch_bounds(&ts).unwrap();
    assert_eq!(lo.data_type(), ts.data_type());
    let nulls: ArrayRef = Arc::new(Int64Array::from(vec![None, None]));
    assert!(batch_bounds(&nulls).is_none());
    let floats: ArrayRef = Arc::new(arrow_array::Float64Array::from(vec![1.0, f64::NAN]));
    assert!(batch_bounds(&floats).is_none());
    let strings: ArrayRef = Arc::new(StringArray::from(vec!["a"]));
    assert!(batch_bounds(&strings).is_none());
}
