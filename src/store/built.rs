//! What a store URL builds into: the kind of store it names, the
//! object_store, and the key prefix (the URL's path) inside it. Shared by
//! the builders of each service ([`super::config`], [`super::gcs`],
//! [`super::azure`]).

use std::sync::Arc;

use object_store::local::LocalFileSystem;
use object_store::ObjectStore;

use crate::error::{Error, Result};
use crate::store::keys;

/// Which kind of store a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Memory,
    File,
    S3,
    Gcs,
    Azure,
    /// A store another library implements, adapted to object_store (a
    /// Python `remote_store.Store`): no compare-and-swap, no ETags.
    Foreign,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Memory => "memory",
            Scheme::File => "file",
            Scheme::S3 => "s3",
            Scheme::Gcs => "gs",
            Scheme::Azure => "az",
            Scheme::Foreign => "remote-store",
        }
    }

    /// A store reached over the network, where requests wait on round trips.
    pub fn is_remote(self) -> bool {
        matches!(self, Scheme::S3 | Scheme::Gcs | Scheme::Azure)
    }
}

/// A built store: the object_store, the key prefix inside it, and, for
/// `file://`, the local root used for compare-and-swap.
pub struct Built {
    pub scheme: Scheme,
    pub store: Arc<dyn ObjectStore>,
    pub prefix: Vec<String>,
    pub local: Option<Arc<LocalFileSystem>>,
}

/// The root prefix of an `s3://bucket/prefix` URL: percent-decoded (a URL's
/// `%20` is a space in the object names, as for file:// paths), then
/// validated like a key.
pub(super) fn url_prefix(url: &url::Url) -> Result<Vec<String>> {
    let decoded = percent_encoding::percent_decode_str(url.path())
        .decode_utf8()
        .map_err(|_| Error::InvalidArgument(format!("store URL path is not UTF-8: {url}")))?;
    keys::segments(&decoded)
}
