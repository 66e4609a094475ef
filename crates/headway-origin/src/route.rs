//! Request targets and `Range` headers, parsed into what the origin will serve.
//!
//! This module owns the URL scheme (see the crate documentation) and byte-range parsing. It is
//! pure: [`Route::parse`] takes the path and query of a request target and [`ByteRange::parse`]
//! a `Range` header value; neither looks at anything else. The server calls `Route::parse` first,
//! then, for documents, evaluates preconditions and only then `ByteRange::parse`.

use std::time::Duration;

use headway_core::units::parse_duration;
use headway_core::ByteSize;

use crate::corpus::{self, Document, Edit, Kind};

/// What a request target asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `GET /`: the index page describing the URL scheme.
    Index,
    /// `GET /healthz`: 200 `ok`.
    Healthz,
    /// `GET /status/{code}`: an empty-ish response with that status.
    Status(u16),
    /// `GET /corpus/{kind}/{size}` or `GET /files/{name}`: a document, with an optional
    /// per-request latency from `?latency=` that replaces the server's default.
    Document {
        /// The document to serve.
        doc: Document,
        /// Latency before the response headers, if the query gave one.
        latency: Option<Duration>,
    },
    /// Anything else: 404.
    NotFound,
}

/// A request target that names a route but with unusable parameters (answered with 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RouteError {
    /// The `{kind}` of `/corpus/{kind}/{size}` is not a known kind.
    #[error(transparent)]
    Kind(#[from] corpus::UnknownKind),
    /// The `{size}` of `/corpus/{kind}/{size}` does not parse as a size.
    #[error("bad size `{0}` (examples: 12MB, 64KiB, 128B, 1500)")]
    Size(String),
    /// `?seed=` is not an unsigned 64-bit integer.
    #[error("bad seed `{0}` (an unsigned integer)")]
    Seed(String),
    /// `?latency=` is not a duration.
    #[error("bad latency `{0}` (examples: 50ms, 1.5s)")]
    Latency(String),
    /// `/status/{code}` is not a number in 200..=599.
    #[error("bad status `{0}` (a number from 200 to 599)")]
    Status(String),
    /// `?edit=` is not a percentage from 0 to 100 with at most four decimals.
    #[error("bad edit `{0}` (a percentage from 0 to 100, e.g. 1%, 0.1%, 5)")]
    Edit(String),
    /// `?repeat=` is not a size.
    #[error("bad repeat `{0}` (a size such as 64KiB; 0 for none)")]
    Repeat(String),
    /// `?edit_seed=` is not an unsigned 64-bit integer.
    #[error("bad edit_seed `{0}` (an unsigned integer)")]
    EditSeed(String),
    /// The edit would need more than [`corpus::MAX_PATCHES`] patches in this document.
    #[error(
        "edit too large: {patches} patches of 64 bytes (at most {})",
        corpus::MAX_PATCHES
    )]
    EditTooLarge {
        /// The number of patches it would need.
        patches: u64,
    },
}

impl Route {
    /// The route for request path `path` and query `query` (without the `?`).
    ///
    /// Unknown query parameters are ignored (benchmarks add cache-busting ones); of repeated
    /// parameters the last wins.
    pub fn parse(path: &str, query: Option<&str>) -> Result<Route, RouteError> {
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match segments.as_slice() {
            [""] => Ok(Route::Index),
            ["healthz"] => Ok(Route::Healthz),
            ["status", code] => match code.parse::<u16>() {
                Ok(c) if (200..=599).contains(&c) => Ok(Route::Status(c)),
                _ => Err(RouteError::Status((*code).to_owned())),
            },
            ["corpus", kind, size] => {
                let kind: Kind = kind.parse()?;
                let size: ByteSize = size
                    .parse()
                    .map_err(|_| RouteError::Size((*size).to_owned()))?;
                let q = Query::parse(query)?;
                q.document(Document::new(kind, size.bytes(), q.seed.unwrap_or(1)))
            }
            ["files", name] => match corpus::file(name) {
                Some(doc) => {
                    let q = Query::parse(query)?;
                    let doc = match q.seed {
                        Some(seed) => Document::new(doc.kind(), doc.size(), seed),
                        None => doc,
                    };
                    q.document(doc)
                }
                None => Ok(Route::NotFound),
            },
            _ => Ok(Route::NotFound),
        }
    }
}

/// The query parameters the origin understands.
#[derive(Debug, Default)]
struct Query {
    seed: Option<u64>,
    latency: Option<Duration>,
    /// `edit`, parts per million.
    edit: Option<u32>,
    edit_seed: Option<u64>,
    /// `repeat`, bytes.
    repeat: Option<u64>,
}

impl Query {
    fn parse(query: Option<&str>) -> Result<Query, RouteError> {
        let mut q = Query::default();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "seed" => {
                    q.seed = Some(v.parse().map_err(|_| RouteError::Seed(v.to_owned()))?);
                }
                "latency" => {
                    q.latency =
                        Some(parse_duration(v).map_err(|_| RouteError::Latency(v.to_owned()))?);
                }
                "edit" => {
                    q.edit =
                        Some(Edit::parse_share(v).ok_or_else(|| RouteError::Edit(v.to_owned()))?);
                }
                "repeat" => {
                    let n: ByteSize = v.parse().map_err(|_| RouteError::Repeat(v.to_owned()))?;
                    q.repeat = Some(n.bytes());
                }
                "edit_seed" => {
                    q.edit_seed = Some(v.parse().map_err(|_| RouteError::EditSeed(v.to_owned()))?);
                }
                _ => {}
            }
        }
        Ok(q)
    }

    /// The document route for `doc` with this query's repeat, edit and latency. `edit=0` is no edit;
    /// `edit_seed` without `edit` is ignored.
    fn document(&self, doc: Document) -> Result<Route, RouteError> {
        let edit = self
            .edit
            .filter(|&ppm| ppm > 0)
            .map(|ppm| Edit::new(ppm, self.edit_seed.unwrap_or(1)));
        if let Some(e) = edit {
            let patches = e.patch_count(doc.size());
            if patches > corpus::MAX_PATCHES {
                return Err(RouteError::EditTooLarge { patches });
            }
        }
        Ok(Route::Document {
            doc: doc.with_repeat(self.repeat.unwrap_or(0)).with_edit(edit),
            latency: self.latency,
        })
    }
}

/// The outcome of a `Range` header against a representation of a known length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// Serve the whole representation with 200 (no header, or one the origin ignores: another
    /// unit, several ranges, or a syntax error — RFC 9110 §14.2 lets a server ignore `Range`).
    Full,
    /// Serve bytes `start..=end` with 206.
    Partial {
        /// First byte, inclusive.
        start: u64,
        /// Last byte, inclusive (`end < len`).
        end: u64,
    },
    /// No byte of the range exists: 416 with `Content-Range: bytes */len`.
    Unsatisfiable,
}

impl ByteRange {
    /// Evaluates a `Range` header value against a representation of `len` bytes.
    ///
    /// Supports one range of the forms `bytes=a-b`, `bytes=a-` and `bytes=-n`.
    pub fn parse(header: Option<&str>, len: u64) -> ByteRange {
        let Some(h) = header else {
            return ByteRange::Full;
        };
        // RFC 9110 §14.1.1: the unit is case-insensitive; whitespace around the set is allowed.
        let h = h.trim();
        let Some(unit_end) = h.find('=') else {
            return ByteRange::Full;
        };
        if !h[..unit_end].trim().eq_ignore_ascii_case("bytes") {
            return ByteRange::Full;
        }
        let spec = h[unit_end + 1..].trim();
        if spec.contains(',') {
            return ByteRange::Full;
        }
        let Some((a, b)) = spec.split_once('-') else {
            return ByteRange::Full;
        };
        let (a, b) = (a.trim(), b.trim());
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
        if a.is_empty() {
            // RFC 9110 §14.1.2: suffix range, the last n bytes.
            if !digits(b) {
                return ByteRange::Full;
            }
            let n: u64 = b.parse().unwrap_or(u64::MAX);
            if n == 0 || len == 0 {
                return ByteRange::Unsatisfiable;
            }
            let n = n.min(len);
            return ByteRange::Partial {
                start: len - n,
                end: len - 1,
            };
        }
        if !digits(a) || !(b.is_empty() || digits(b)) {
            return ByteRange::Full;
        }
        let start: u64 = a.parse().unwrap_or(u64::MAX);
        let end: u64 = if b.is_empty() {
            u64::MAX
        } else {
            b.parse().unwrap_or(u64::MAX)
        };
        if end < start {
            // RFC 9110 §14.1.1: an invalid range-spec; the whole header is ignored.
            return ByteRange::Full;
        }
        if start >= len {
            return ByteRange::Unsatisfiable;
        }
        ByteRange::Partial {
            start,
            end: end.min(len - 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corpus_routes() {
        assert_eq!(
            Route::parse("/corpus/pdf/12MB", None),
            Ok(Route::Document {
                doc: Document::new(Kind::Pdf, 12_000_000, 1),
                latency: None
            })
        );
        assert_eq!(
            Route::parse("/corpus/html/64KiB", Some("seed=7&latency=50ms&x=1")),
            Ok(Route::Document {
                doc: Document::new(Kind::Html, 65_536, 7),
                latency: Some(Duration::from_millis(50))
            })
        );
        assert_eq!(
            Route::parse("/corpus/random/1500", Some("")),
            Ok(Route::Document {
                doc: Document::new(Kind::Random, 1500, 1),
                latency: None
            })
        );
        assert!(matches!(
            Route::parse("/corpus/exe/1MB", None),
            Err(RouteError::Kind(_))
        ));
        assert!(matches!(
            Route::parse("/corpus/doc/12XB", None),
            Err(RouteError::Size(_))
        ));
        assert!(matches!(
            Route::parse("/corpus/doc/1", Some("seed=-1")),
            Err(RouteError::Seed(_))
        ));
        assert!(matches!(
            Route::parse("/corpus/doc/1", Some("latency=soon")),
            Err(RouteError::Latency(_))
        ));
    }

    #[test]
    fn repeated_documents() {
        assert_eq!(
            Route::parse("/corpus/html/512KiB", Some("repeat=64KiB")),
            Ok(Route::Document {
                doc: Document::new(Kind::Html, 512 << 10, 1).with_repeat(64 << 10),
                latency: None
            })
        );
        assert!(matches!(
            Route::parse("/corpus/html/1", Some("repeat=lots")),
            Err(RouteError::Repeat(_))
        ));
        let d = Document::new(Kind::Html, 10_000, 3).with_repeat(4096);
        let mut whole = vec![0; 10_000];
        assert_eq!(d.fill(0, &mut whole), 10_000);
        let mut first = vec![0; 4096];
        Document::new(Kind::Html, 4096, 3).fill(0, &mut first);
        assert_eq!(&whole[..4096], &first[..]);
        assert_eq!(&whole[4096..8192], &first[..]);
        assert_eq!(&whole[8192..], &first[..10_000 - 8192]);
        // Any window agrees with the whole.
        let mut w = vec![0; 3000];
        d.fill(3000, &mut w);
        assert_eq!(w, whole[3000..6000]);
        assert_ne!(d.etag(), Document::new(Kind::Html, 10_000, 3).etag());
        assert!(d.etag().contains("-r4096"));
    }

    #[test]
    fn other_routes() {
        assert_eq!(Route::parse("/", None), Ok(Route::Index));
        assert_eq!(Route::parse("/healthz", None), Ok(Route::Healthz));
        assert_eq!(Route::parse("/status/503", None), Ok(Route::Status(503)));
        assert!(Route::parse("/status/42", None).is_err());
        assert_eq!(Route::parse("/nope", None), Ok(Route::NotFound));
        assert_eq!(Route::parse("/corpus/pdf", None), Ok(Route::NotFound));
        assert_eq!(Route::parse("/files/nope", None), Ok(Route::NotFound));
        assert_eq!(
            Route::parse("/files/pdf_small", None),
            Ok(Route::Document {
                doc: Document::new(Kind::Pdf, 1_240_000, 101),
                latency: None
            })
        );
    }

    #[test]
    fn edits() {
        let doc = corpus::file("doc_large").unwrap();
        let edited = |ppm, seed| {
            Ok(Route::Document {
                doc: doc.with_edit(Some(Edit::new(ppm, seed))),
                latency: None,
            })
        };
        assert_eq!(
            Route::parse("/files/doc_large", Some("edit=1%")),
            edited(10_000, 1)
        );
        assert_eq!(
            Route::parse("/files/doc_large", Some("edit=0.1%25&edit_seed=9")),
            edited(1000, 9)
        );
        assert_eq!(
            Route::parse("/files/doc_large", Some("edit=5")),
            edited(50_000, 1)
        );
        assert_eq!(
            Route::parse("/files/doc_large", Some("edit=100%")),
            edited(1_000_000, 1)
        );
        assert_eq!(
            Route::parse("/files/doc_large", Some("edit=0.0001")),
            edited(1, 1)
        );
        // No edit at 0 %, and edit_seed alone changes nothing.
        let plain = Ok(Route::Document { doc, latency: None });
        assert_eq!(Route::parse("/files/doc_large", Some("edit=0%")), plain);
        assert_eq!(Route::parse("/files/doc_large", Some("edit_seed=4")), plain);
        assert_eq!(
            Route::parse("/corpus/random/1000", Some("seed=3&edit=12.5%")),
            Ok(Route::Document {
                doc: Document::new(Kind::Random, 1000, 3).with_edit(Some(Edit::new(125_000, 1))),
                latency: None
            })
        );
        for bad in [
            "edit=200%",
            "edit=100.01",
            "edit=abc",
            "edit=",
            "edit=-1",
            "edit=1e2",
            "edit=nan",
            "edit=1.",
            "edit=.5",
            "edit=0.00001",
            "edit=1%%",
            "edit=1000",
        ] {
            assert!(
                matches!(
                    Route::parse("/files/doc_large", Some(bad)),
                    Err(RouteError::Edit(_))
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            Route::parse("/files/doc_large", Some("edit=1&edit_seed=x")),
            Err(RouteError::EditSeed(_))
        ));
        assert!(matches!(
            Route::parse("/corpus/random/100GB", Some("edit=50")),
            Err(RouteError::EditTooLarge { .. })
        ));
    }

    #[test]
    fn an_edit_query_parses_back_to_the_edit() {
        for (ppm, seed) in [(10_000, 1), (1000, 7), (50_000, 2), (1, 3), (123_400, 4)] {
            let e = Edit::new(ppm, seed);
            let route = Route::parse("/corpus/doc/1MB", Some(&e.query()));
            assert_eq!(
                route,
                Ok(Route::Document {
                    doc: Document::new(Kind::Doc, 1_000_000, 1).with_edit(Some(e)),
                    latency: None
                }),
                "{}",
                e.query()
            );
        }
    }

    #[test]
    fn ranges() {
        use ByteRange::*;
        assert_eq!(ByteRange::parse(None, 100), Full);
        assert_eq!(
            ByteRange::parse(Some("bytes=10-19"), 100),
            Partial { start: 10, end: 19 }
        );
        assert_eq!(
            ByteRange::parse(Some("bytes=90-"), 100),
            Partial { start: 90, end: 99 }
        );
        assert_eq!(
            ByteRange::parse(Some("bytes=90-500"), 100),
            Partial { start: 90, end: 99 }
        );
        assert_eq!(
            ByteRange::parse(Some("bytes=-10"), 100),
            Partial { start: 90, end: 99 }
        );
        assert_eq!(
            ByteRange::parse(Some("bytes=-1000"), 100),
            Partial { start: 0, end: 99 }
        );
        assert_eq!(ByteRange::parse(Some("bytes=100-"), 100), Unsatisfiable);
        assert_eq!(ByteRange::parse(Some("bytes=-0"), 100), Unsatisfiable);
        assert_eq!(ByteRange::parse(Some("bytes=0-0"), 0), Unsatisfiable);
        assert_eq!(ByteRange::parse(Some("bytes=0-1,5-6"), 100), Full);
        assert_eq!(ByteRange::parse(Some("items=0-1"), 100), Full);
        assert_eq!(ByteRange::parse(Some("bytes=5-1"), 100), Full);
        assert_eq!(ByteRange::parse(Some("bytes=x-1"), 100), Full);
        assert_eq!(ByteRange::parse(Some("bytes"), 100), Full);
    }
}
