//! An in-memory `ObjectStore` whose requests a test observes or fails: one
//! wrapper for the tests that count requests, inject faults by rule, or run
//! code as a listing starts. Test code only.
//!
//! Before each request the store asks its [`Hook`] what to do with it
//! ([`Outcome`]): forward it, fail it without applying it, or apply it and
//! fail as if the reply were lost (a PUT or copy; a read that "loses its
//! reply" simply fails). Deletes are observed path by path, never failed.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// A request, as its hook sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Put,
    /// The start of a multipart upload.
    PutMultipart,
    Get,
    Head,
    /// One path of a delete.
    Delete,
    /// A recursive listing.
    List,
    /// A listing by delimiter.
    ListDelimited,
    /// A copy (`path` is its destination).
    Copy,
}

/// What the store does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Forward,
    /// Fail without applying the request.
    Fail,
    /// Apply the request, then fail as if its reply were lost.
    LoseReply,
}

impl Outcome {
    /// `request` (a write: a PUT or a copy) as this outcome says: run,
    /// refused before it runs, or run with its reply lost.
    async fn write<T>(
        self,
        request: impl std::future::Future<Output = object_store::Result<T>>,
    ) -> object_store::Result<T> {
        match self {
            Outcome::Forward => request.await,
            Outcome::Fail => Err(injected()),
            Outcome::LoseReply => {
                request.await?;
                Err(injected())
            }
        }
    }
}

/// Decides each request's [`Outcome`]; it may also act on the store below
/// (`inner`), as another writer would.
pub trait Hook: Send + Sync + 'static {
    fn on(&self, op: Op, path: Option<&Path>, inner: &InMemory) -> Outcome;
}

/// The error an injected fault returns: a transport error, as a reset
/// connection gives.
pub fn injected() -> object_store::Error {
    object_store::Error::Generic {
        store: "Hooked",
        source: "connection reset by peer (injected)".into(),
    }
}

/// An [`InMemory`] store whose requests go through a [`Hook`] first. It
/// dereferences to the hook, so a test reaches the hook's state through the
/// store.
pub struct Hooked<H: Hook> {
    inner: Arc<InMemory>,
    hook: Arc<H>,
}

impl<H: Hook> Hooked<H> {
    pub fn new(hook: H) -> Self {
        Self::shared(Arc::new(hook))
    }

    /// With a hook the test keeps a handle on.
    pub fn shared(hook: Arc<H>) -> Self {
        Self {
            inner: Arc::new(InMemory::new()),
            hook,
        }
    }

    fn on(&self, op: Op, path: Option<&Path>) -> Outcome {
        self.hook.on(op, path, &self.inner)
    }
}

impl<H: Hook> Deref for Hooked<H> {
    type Target = H;

    fn deref(&self) -> &H {
        &self.hook
    }
}

impl<H: Hook> fmt::Debug for Hooked<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hooked({})", self.inner)
    }
}

impl<H: Hook> fmt::Display for Hooked<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hooked({})", self.inner)
    }
}

#[async_trait::async_trait]
impl<H: Hook> ObjectStore for Hooked<H> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let outcome = self.on(Op::Put, Some(location));
        outcome
            .write(self.inner.put_opts(location, payload, opts))
            .await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        match self.on(Op::PutMultipart, Some(location)) {
            Outcome::Forward => self.inner.put_multipart_opts(location, opts).await,
            Outcome::Fail | Outcome::LoseReply => Err(injected()),
        }
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let op = if options.head { Op::Head } else { Op::Get };
        match self.on(op, Some(location)) {
            Outcome::Forward => self.inner.get_opts(location, options).await,
            Outcome::Fail | Outcome::LoseReply => Err(injected()),
        }
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let (hook, inner) = (self.hook.clone(), self.inner.clone());
        let observed = locations
            .inspect(move |p| {
                if let Ok(p) = p {
                    hook.on(Op::Delete, Some(p), &inner);
                }
            })
            .boxed();
        self.inner.delete_stream(observed)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        match self.on(Op::List, prefix) {
            Outcome::Forward => self.inner.list(prefix),
            Outcome::Fail | Outcome::LoseReply => {
                futures::stream::once(async { Err(injected()) }).boxed()
            }
        }
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        match self.on(Op::ListDelimited, prefix) {
            Outcome::Forward => self.inner.list_with_delimiter(prefix).await,
            Outcome::Fail | Outcome::LoseReply => Err(injected()),
        }
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        let outcome = self.on(Op::Copy, Some(to));
        outcome.write(self.inner.copy_opts(from, to, options)).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use object_store::ObjectStoreExt;

    use super::*;
    use futures::executor::block_on;

    /// Records every request; fails the first GET, loses the first PUT's
    /// reply.
    #[derive(Default)]
    struct Log(Mutex<Vec<(Op, String)>>);

    impl Hook for Log {
        fn on(&self, op: Op, path: Option<&Path>, _: &InMemory) -> Outcome {
            let mut log = self.0.lock().unwrap_or_else(|e| e.into_inner());
            let first = !log.iter().any(|(o, _)| *o == op);
            log.push((op, path.map(|p| p.to_string()).unwrap_or_default()));
            match op {
                Op::Get if first => Outcome::Fail,
                Op::Put if first => Outcome::LoseReply,
                _ => Outcome::Forward,
            }
        }
    }

    #[test]
    fn requests_reach_the_hook_and_its_outcome_holds() {
        let store = Hooked::new(Log::default());
        let (a, b) = (Path::from("d/a"), Path::from("d/b"));
        // The reply is lost, but the object is stored.
        assert!(block_on(store.put(&a, "1".into())).is_err());
        block_on(store.put(&b, "2".into())).unwrap();
        assert!(block_on(store.get(&a)).is_err(), "the first GET fails");
        let got = block_on(async { store.get(&a).await?.bytes().await }).unwrap();
        assert_eq!(&got[..], b"1");
        assert!(block_on(store.head(&b)).is_ok());
        let listed: Vec<_> = block_on(store.list(Some(&Path::from("d"))).collect::<Vec<_>>());
        assert_eq!(listed.len(), 2);
        block_on(store.delete(&b)).unwrap();
        let ops: Vec<Op> = store.0.lock().unwrap().iter().map(|(o, _)| *o).collect();
        assert_eq!(
            ops,
            [
                Op::Put,
                Op::Put,
                Op::Get,
                Op::Get,
                Op::Head,
                Op::List,
                Op::Delete
            ]
        );
        assert!(block_on(store.head(&b)).is_err(), "deleted");
    }
}
