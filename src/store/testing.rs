//! For the stores' tests: open a URL with options through the one builder
//! every store goes through, or the message of the `InvalidArgument` it
//! fails with.

use std::collections::BTreeMap;

use super::built::Built;
use super::config::build;
use crate::error::{Error, Result};

pub fn open(url: &str, pairs: &[(&str, &str)]) -> Result<Built> {
    let options: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    build(url, &options)
}

#[test]
fn retry_timeouts_out_of_range_are_refused() {
    for bad in ["1e20", "inf", "NaN", "x"] {
        let m = refused("s3://b", &[("retry_timeout_secs", bad)]);
        assert!(m.contains("retry_timeout_secs"), "{m}");
    }
    assert!(open("s3://b", &[("retry_timeout_secs", "-1")]).is_ok());
}

pub fn refused(url: &str, pairs: &[(&str, &str)]) -> String {
    match open(url, pairs) {
        Err(Error::InvalidArgument(m)) => m,
        Err(other) => panic!("{url} {pairs:?}: {other:?}"),
        Ok(_) => panic!("{url} {pairs:?} was accepted"),
    }
}
