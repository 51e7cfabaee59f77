//! Decoding whole parts held in memory, several at once, for stores that
//! hand over bytes (remote-store backends other than pds's own, read
//! through the Store's own methods).

use bytes::Bytes;

use crate::error::{Error, Result};

/// Decode several in-memory parts at once; results keep the input order.
pub fn decode_parts(
    parts: Vec<(String, Bytes)>,
    opts: &crate::parquet::decode::ReadOptions,
) -> Result<Vec<crate::parquet::decode::Decoded>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .into_iter()
            .map(|(name, data)| {
                let fallback = name.clone();
                (
                    fallback,
                    scope.spawn(move || {
                        crate::error::contained(|| {
                            crate::parquet::decode::decode_bytes(data, &name, opts)
                        })
                    }),
                )
            })
            .collect();
        // decode_bytes contains decoder panics itself; this is the last line.
        handles
            .into_iter()
            .map(|(name, h)| {
                h.join().unwrap_or_else(|payload| {
                    Err(Error::PartCorrupted {
                        path: name,
                        reason: format!(
                            "the Parquet decoder failed on its bytes ({})",
                            crate::error::panic_message(payload.as_ref())
                        ),
                    })
                })
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parquet::encode::{encode_to_bytes, EncodeOptions};
    use arrow_array::{Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;

    #[test]
    fn parts_decode_in_their_order_and_damage_names_its_part() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let opts = EncodeOptions::new("zstd", None, None).unwrap();
        let parts: Vec<(String, Bytes)> = (0..6)
            .map(|i| {
                let batch = RecordBatch::try_new(
                    schema.clone(),
                    vec![Arc::new(Int64Array::from_iter_values(i * 10..i * 10 + 10))],
                )
                .unwrap();
                let (bytes, _) = encode_to_bytes(&[batch], schema.clone(), &opts).unwrap();
                (format!("p{i}"), bytes)
            })
            .collect();
        let decoded = decode_parts(parts.clone(), &Default::default()).unwrap();
        let firsts: Vec<i64> = decoded
            .iter()
            .map(|d| {
                d.batches[0]
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .value(0)
            })
            .collect();
        assert_eq!(firsts, vec![0, 10, 20, 30, 40, 50]);
        let mut damaged = parts;
        damaged[3].1 = Bytes::from_static(b"not a parquet file");
        match decode_parts(damaged, &Default::default()) {
            Err(Error::PartCorrupted { path, .. }) => assert_eq!(path, "p3"),
            other => panic!("expected PartCorrupted, got {other:?}"),
        }
    }
}
