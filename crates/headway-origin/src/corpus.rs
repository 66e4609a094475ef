//! The deterministic corpus: documents addressed by `(kind, size, seed)`.
//!
//! This module owns the byte generator behind every body the origin serves. It is pure: no I/O,
//! no clock, no global randomness. Entry points are [`fill`] (any window of a stream),
//! [`Document`] (a finite prefix of a stream, optionally with an [`Edit`], with a chunk
//! iterator, its ETag and its SHA-256) and [`sha256`]; [`FILES`] names the seed documents of
//! scenario 000.
//!
//! # Streams and documents
//!
//! Every `(kind, seed)` pair defines an infinite byte *stream*; the document `(kind, size, seed)`
//! is the first `size` bytes of that stream. So a document of size `n` is a prefix of the document
//! of size `m > n` with the same kind and seed, any size is equally cheap, and any window can be
//! generated without generating what precedes it.
//!
//! # The generator (generation [`GENERATION`])
//!
//! Changing anything below changes every served byte, every ETag and the SHA-256 pins in the
//! tests; do it deliberately and bump [`GENERATION`].
//!
//! - *Key.* `key(kind, seed) = mix(mix(seed ^ salt(kind)) + GAMMA)`, where `mix` is the
//!   SplitMix64 finaliser and `GAMMA` = `0x9e37_79b9_7f4a_7c15`.
//! - *Noise.* The noise stream of a key `k` is the SplitMix64 sequence started at `k`: the
//!   little-endian 8-byte word `i` is `mix(k + (i + 1) * GAMMA)`. It is counter-based, so any
//!   offset is reachable in O(1), and fast (one multiply chain per 8 bytes).
//! - *`random`* is the noise stream of its key, nothing else.
//! - *`pdf`, `doc` and `html`* are built from a per-kind *base block* of [`PERIOD`] = 1 MiB,
//!   generated once per process from a fixed seed by a small grammar (PDF objects with
//!   high-entropy image streams and text content streams; OLE-like header and sector tables
//!   between paragraphs of pseudo-words; HTML tags, attributes and text). Every base byte has a
//!   class: *literal* (structure: tag and keyword names, punctuation, digits), *letter* (text:
//!   words, attribute values), *keyed* (binary tables and padding) or *noise* (compressed-stream
//!   payload).
//!
//!   The stream is cut into periods of 1 MiB. Period `j` uses the period key
//!   `kj = mix(key ^ mix(j + 1))`, which gives a rotation `r` of the base block (`r = 0` for
//!   period 0, so every document starts like a real file does: `%PDF-`, the OLE signature,
//!   `<!DOCTYPE html>`), a permutation `σ` of the 26 letters (applied alike to upper case) and
//!   a non-zero byte `x` (bits 32..40 of `kj`, low bit set). Byte `t` of period `j` is then,
//!   with `b = base[(r + t) mod PERIOD]`: `b` if literal, `σ(b)` if letter, `b ^ x` if keyed,
//!   and the byte at that stream offset of the noise stream keyed `mix(key ^ 0x6e6f_6973_6521_0000)`
//!   if noise.
//!
//! # What this buys, and what it costs
//!
//! - *Compressibility* is the base block's: `σ` and `^ x` are bijections on their class, so
//!   an LZ77 parse and its entropy code carry over. `pdf` compresses about 1.05:1, `doc` about
//!   3:1, `html` about 4:1 with gzip (the tests pin the bands).
//! - *No artificial dedup.* Documents of different seeds differ at every letter and noise byte,
//!   and so do different periods of one document; what they share is literal structure only, in
//!   short runs (tag names, punctuation), as real files of one format do. The exact repetition
//!   period of a stream is therefore unbounded rather than 1 MiB; a test checks that 48-byte
//!   windows are essentially never shared between seeds or between periods.
//! - *Speed.* `random` is pure counter arithmetic (several GB/s in release builds). The other
//!   kinds do one table lookup per byte on top of the noise; the server additionally caches whole
//!   generated periods, so steady-state serving is zero-copy slicing.
//!
//! # Edited documents
//!
//! An [`Edit`] makes a *lightly modified copy* of a document, the case a WAN optimizer's dedup
//! must send cheaply: a share of the document's bytes replaced by random [`PATCH`]-byte patches
//! at random places, as `headway-dedup`'s codec test `lightly_modified_copy_costs_little` does.
//! For a document of `size` bytes and a share of `ppm` parts per million the edit has
//! `n = round(size × ppm / 10⁶ / PATCH)` patches (at least one when `ppm > 0` and `size > 0`),
//! each `min(PATCH, size)` bytes long:
//!
//! - the edit key is `k = mix(mix(seed ^ EDIT_SALT) ^ mix(ppm) ^ mix(size).rotate_left(17))`,
//!   so edits of other shares or sizes are unrelated, not sub- or supersets of each other;
//! - patch `i` starts at `mix(k + (2i + 1) × GAMMA) mod (size − len + 1)` (uniform, patches may
//!   overlap) and its bytes are the noise stream keyed `mix(k + (2i + 2) × GAMMA)` from 0;
//! - patches are laid over the unedited bytes in order of their start (by `i` among equal
//!   starts), a later one over an earlier one where they overlap.
//!
//! [`Patches`] is that sorted list, computed once (O(n log n)) and laid over any window with
//! [`Patches::apply`] (O(log n + patches in the window)), so an edited document streams like
//! any other. Because patches may overlap, and a random byte equals the one it replaces one
//! time in 256, slightly fewer than `size × ppm / 10⁶` bytes actually differ. An edit has at
//! most [`MAX_PATCHES`] patches (the list must fit one request's memory).

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use headway_core::rng::mix64 as mix;
use sha2::{Digest, Sha256};

/// The generator's generation; part of every ETag. Bump it whenever generated bytes change.
pub const GENERATION: u32 = 1;

/// Length of one period of the structured kinds (and of their base blocks): 1 MiB.
pub const PERIOD: usize = 1 << 20;

const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// The kind of content a document imitates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// PDF-like: PDF object structure around high-entropy image streams; about 1.05:1 with gzip.
    Pdf,
    /// DOC-like: pseudo-word text with some binary structure; about 3:1 with gzip.
    Doc,
    /// Uniform random bytes; incompressible.
    Random,
    /// HTML: tags, attributes and text; about 4:1 with gzip (60–80 % compressible).
    Html,
}

impl Kind {
    /// All kinds, in URL order.
    pub const ALL: [Kind; 4] = [Kind::Pdf, Kind::Doc, Kind::Random, Kind::Html];

    /// The kind's name in URLs: `pdf`, `doc`, `random`, `html`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Pdf => "pdf",
            Kind::Doc => "doc",
            Kind::Random => "random",
            Kind::Html => "html",
        }
    }

    /// The `Content-Type` the origin serves this kind with.
    pub const fn content_type(self) -> &'static str {
        match self {
            Kind::Pdf => "application/pdf",
            Kind::Doc => "application/msword",
            Kind::Random => "application/octet-stream",
            Kind::Html => "text/html; charset=utf-8",
        }
    }

    const fn salt(self) -> u64 {
        match self {
            Kind::Pdf => 0x5044_4621_0000_0001,
            Kind::Doc => 0x444f_4321_0000_0002,
            Kind::Random => 0x524e_4421_0000_0003,
            Kind::Html => 0x4854_4d4c_0000_0004,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A kind name that is none of `pdf`, `doc`, `random`, `html`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown document kind `{0}` (known: pdf, doc, random, html)")]
pub struct UnknownKind(pub String);

impl FromStr for Kind {
    type Err = UnknownKind;
    fn from_str(s: &str) -> Result<Self, UnknownKind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownKind(s.to_owned()))
    }
}

/// The document `(kind, size, seed)`: the first `size` bytes of the `(kind, seed)` stream,
/// with an optional [`Edit`] laid over them. With a *repeat* of `r` bytes
/// ([`Document::with_repeat`]) the document is instead the stream's first `r` bytes over and over
/// (byte `o` is stream byte `o mod r`), as the F5 report's 512 KB page was its 64 KB page
/// repeated; an edit is laid over the repeated bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Document {
    kind: Kind,
    size: u64,
    seed: u64,
    edit: Option<Edit>,
    /// Repeat the stream's first this many bytes; 0 = no repeat.
    repeat: u64,
}

impl Document {
    /// The document of `size` bytes of kind `kind` with seed `seed` (unedited).
    pub const fn new(kind: Kind, size: u64, seed: u64) -> Self {
        Self {
            kind,
            size,
            seed,
            edit: None,
            repeat: 0,
        }
    }

    /// This document as the stream's first `repeat` bytes repeated up to its size (0: not
    /// repeated; a repeat at least as long as the document changes nothing but the ETag).
    pub const fn with_repeat(self, repeat: u64) -> Self {
        Self { repeat, ..self }
    }

    /// The repeat length, 0 when not repeated.
    pub const fn repeat(&self) -> u64 {
        self.repeat
    }

    /// The stream offset that byte `offset` of the document comes from, and how many bytes
    /// from there on are consecutive in the stream (up to the end of the repeat).
    pub const fn source(&self, offset: u64) -> (u64, u64) {
        if self.repeat == 0 {
            (offset, u64::MAX)
        } else {
            let within = offset % self.repeat;
            (within, self.repeat - within)
        }
    }

    /// This document with `edit` laid over it (`None`: unedited).
    pub const fn with_edit(self, edit: Option<Edit>) -> Self {
        Self { edit, ..self }
    }

    /// The edit laid over the stream's bytes, if any.
    pub const fn edit(&self) -> Option<Edit> {
        self.edit
    }

    /// The document's kind.
    pub const fn kind(&self) -> Kind {
        self.kind
    }

    /// The document's length in bytes.
    pub const fn size(&self) -> u64 {
        self.size
    }

    /// The document's seed.
    pub const fn seed(&self) -> u64 {
        self.seed
    }

    /// A strong entity tag, deterministic in generation, kind, size, seed and edit (with
    /// quotes): `"hw1-doc-5000-1"`, edited `"hw1-doc-5000-1-e10000.7"` (share in parts per
    /// million, edit seed).
    pub fn etag(&self) -> String {
        let edit = self
            .edit
            .map(|e| format!("-e{}.{}", e.ppm(), e.seed()))
            .unwrap_or_default();
        let repeat = if self.repeat > 0 {
            format!("-r{}", self.repeat)
        } else {
            String::new()
        };
        format!(
            "\"hw{}-{}-{}-{}{repeat}{edit}\"",
            GENERATION,
            self.kind.as_str(),
            self.size,
            self.seed
        )
    }

    /// The patches of this document's edit (empty when unedited), for [`Document::fill_with`].
    pub fn patches(&self) -> Patches {
        self.edit
            .map_or_else(Patches::default, |e| Patches::new(e, self.size))
    }

    /// Fills `buf` with the document's bytes from `offset`, stopping at the document's end.
    /// Returns how many bytes were written (0 if `offset >= size`).
    ///
    /// An edited document computes its [`Patches`] on every call; to fill many windows, compute
    /// them once with [`Document::patches`] and call [`Document::fill_with`].
    pub fn fill(&self, offset: u64, buf: &mut [u8]) -> usize {
        self.fill_with(&self.patches(), offset, buf)
    }

    /// [`Document::fill`] with this document's `patches` computed beforehand.
    pub fn fill_with(&self, patches: &Patches, offset: u64, buf: &mut [u8]) -> usize {
        let left = self.size.saturating_sub(offset);
        let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
        let mut done = 0;
        while done < n {
            let (src, run) = self.source(offset + done as u64);
            let m = usize::try_from(run).unwrap_or(usize::MAX).min(n - done);
            fill(self.kind, self.seed, src, &mut buf[done..done + m]);
            done += m;
        }
        patches.apply(offset, &mut buf[..n]);
        n
    }

    /// The document's bytes as consecutive chunks of at most `chunk` bytes (at least 1).
    pub fn chunks(&self, chunk: usize) -> Chunks {
        Chunks {
            doc: *self,
            patches: self.patches(),
            offset: 0,
            chunk: chunk.max(1),
        }
    }

    /// The SHA-256 of the document's bytes (edit included).
    pub fn sha256(&self) -> [u8; 32] {
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 256 * 1024];
        let patches = self.patches();
        let mut offset = 0;
        loop {
            let n = self.fill_with(&patches, offset, &mut buf);
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            offset += n as u64;
        }
        hasher.finalize().into()
    }
}

/// Iterator over a document's bytes in chunks; see [`Document::chunks`].
#[derive(Debug, Clone)]
pub struct Chunks {
    doc: Document,
    patches: Patches,
    offset: u64,
    chunk: usize,
}

impl Iterator for Chunks {
    type Item = Vec<u8>;

    fn next(&mut self) -> Option<Vec<u8>> {
        let left = self.doc.size.saturating_sub(self.offset);
        if left == 0 {
            return None;
        }
        let n = usize::try_from(left).unwrap_or(usize::MAX).min(self.chunk);
        let mut v = vec![0; n];
        self.doc.fill_with(&self.patches, self.offset, &mut v);
        self.offset += n as u64;
        Some(v)
    }
}

/// Length of one patch of an [`Edit`], bytes.
pub const PATCH: usize = 64;

/// Most patches one edit may have (16 bytes each in [`Patches`]: 64 MiB).
pub const MAX_PATCHES: u64 = 1 << 22;

/// Mixed into every edit key, so that edit keys and stream keys never coincide.
const EDIT_SALT: u64 = 0x6564_6974_0000_0005;

/// A share of a document's bytes replaced by random [`PATCH`]-byte patches at random places
/// (see "Edited documents" in the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Edit {
    ppm: u32,
    seed: u64,
}

impl Edit {
    /// Parts per million in one percent.
    pub const PPM_PER_PERCENT: u32 = 10_000;

    /// An edit of `ppm` parts per million of the bytes (10 000 = 1 %; clamped to 10⁶ = all),
    /// placed and filled by `seed`.
    pub const fn new(ppm: u32, seed: u64) -> Self {
        let ppm = if ppm > 1_000_000 { 1_000_000 } else { ppm };
        Self { ppm, seed }
    }

    /// A share written as a percentage from 0 to 100 with at most four decimals, with or
    /// without a trailing `%` (raw or percent-encoded as `%25`), in parts per million: `1%` →
    /// 10 000, `0.1` → 1000, `100` → 10⁶; `None` for anything else (`200%`, `abc`, `1e2`).
    pub fn parse_share(text: &str) -> Option<u32> {
        let v = text
            .strip_suffix("%25")
            .or_else(|| text.strip_suffix('%'))
            .unwrap_or(text);
        let (whole, frac) = v.split_once('.').unwrap_or((v, ""));
        let digits = |s: &str| s.bytes().all(|c| c.is_ascii_digit());
        if whole.is_empty() || whole.len() > 3 || !digits(whole) || !digits(frac) {
            return None;
        }
        if frac.len() > 4 || v.ends_with('.') {
            return None;
        }
        let whole: u32 = whole.parse().ok()?;
        let frac: u32 = format!("{frac:0<4}").parse().ok()?;
        let ppm = whole * Self::PPM_PER_PERCENT + frac;
        (ppm <= 100 * Self::PPM_PER_PERCENT).then_some(ppm)
    }

    /// The share of bytes replaced, parts per million.
    pub const fn ppm(&self) -> u32 {
        self.ppm
    }

    /// The share of bytes replaced, percent.
    pub fn percent(&self) -> f64 {
        f64::from(self.ppm) / f64::from(Self::PPM_PER_PERCENT)
    }

    /// The seed of the patches' places and bytes.
    pub const fn seed(&self) -> u64 {
        self.seed
    }

    /// The number of patches this edit makes in a document of `size` bytes.
    pub fn patch_count(&self, size: u64) -> u64 {
        if self.ppm == 0 || size == 0 {
            return 0;
        }
        let edited = u128::from(size) * u128::from(self.ppm);
        let per_patch = 1_000_000 * PATCH as u128;
        let n = (edited + per_patch / 2) / per_patch;
        u64::try_from(n).unwrap_or(u64::MAX).max(1)
    }

    /// The query that asks the origin for this edit: `edit=1%25&edit_seed=7`.
    pub fn query(&self) -> String {
        format!("edit={}%25&edit_seed={}", self.percent_text(), self.seed)
    }

    /// The share as a short decimal number of percent: `1`, `0.1`, `12.5`.
    fn percent_text(&self) -> String {
        let per = Self::PPM_PER_PERCENT;
        let (whole, frac) = (self.ppm / per, self.ppm % per);
        if frac == 0 {
            whole.to_string()
        } else {
            let digits = format!("{frac:04}");
            format!("{whole}.{}", digits.trim_end_matches('0'))
        }
    }
}

impl fmt::Display for Edit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}% (seed {})", self.percent_text(), self.seed)
    }
}

/// The patches of an [`Edit`] on a document of a given size, sorted by start: what
/// [`Document::fill_with`] lays over generated bytes. Empty for an unedited document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Patches {
    /// `(start, noise key)` of every patch, sorted by start (stable: by index among equals).
    list: Vec<(u64, u64)>,
    /// The length of every patch: `min(PATCH, size)`.
    len: u64,
}

impl Patches {
    /// The patches `edit` makes in a document of `size` bytes; at most [`MAX_PATCHES`] (a
    /// larger edit is cut to that many: callers that take requests refuse it beforehand).
    pub fn new(edit: Edit, size: u64) -> Patches {
        let count = edit.patch_count(size).min(MAX_PATCHES);
        let len = size.min(PATCH as u64);
        let span = size - len + 1;
        let key =
            mix(mix(edit.seed ^ EDIT_SALT) ^ mix(u64::from(edit.ppm)) ^ mix(size).rotate_left(17));
        let word = |j: u64| mix(key.wrapping_add(j.wrapping_mul(GAMMA)));
        let mut list: Vec<(u64, u64)> = (0..count)
            .map(|i| (word(2 * i + 1) % span, word(2 * i + 2)))
            .collect();
        list.sort_by_key(|&(start, _)| start);
        Patches { list, len }
    }

    /// The number of patches.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there are none (an unedited document).
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The patches that overlap bytes `offset .. offset + len`, in the order they are laid.
    fn within(&self, offset: u64, len: usize) -> impl Iterator<Item = &(u64, u64)> {
        let end = offset.saturating_add(len as u64);
        // Every patch has the same length, so "ends at or before `offset`" holds for a prefix.
        let first = self
            .list
            .partition_point(|&(start, _)| start + self.len <= offset);
        self.list[first..]
            .iter()
            .take_while(move |&&(start, _)| start < end)
    }

    /// Whether any patch overlaps bytes `offset .. offset + len`.
    pub fn touches(&self, offset: u64, len: usize) -> bool {
        len > 0 && self.within(offset, len).next().is_some()
    }

    /// Lays the patches over `buf`, which holds the unedited bytes from stream offset `offset`.
    pub fn apply(&self, offset: u64, buf: &mut [u8]) {
        let end = offset + buf.len() as u64;
        for &(start, key) in self.within(offset, buf.len()) {
            let from = start.max(offset);
            let to = (start + self.len).min(end);
            fill_noise(
                key,
                from - start,
                &mut buf[(from - offset) as usize..(to - offset) as usize],
            );
        }
    }
}

/// The SHA-256 of the (unedited) document `(kind, size, seed)`, for verifying transfers.
pub fn sha256(kind: Kind, size: u64, seed: u64) -> [u8; 32] {
    Document::new(kind, size, seed).sha256()
}

/// Lower-case hex of a digest, for logs and reports.
pub fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// One of the seed documents of scenario 000, served at `/files/{name}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamedFile {
    /// The file's name in `/files/{name}`.
    pub name: &'static str,
    /// The document served under that name.
    pub doc: Document,
}

/// The documents downloaded in scenario 000 (seed 000, Appendix C; the scenario's
/// `citrix_download_files.csv`): sizes in MB of 10^6 bytes, rounded to the byte. Each file has
/// its own seed so that no file is a prefix of another (which would hand a WAN optimiser an
/// artificial dedup hit on a first pass).
pub const FILES: [NamedFile; 6] = [
    named("pdf_small", Kind::Pdf, 1_240_000, 101),
    named("pdf_medium", Kind::Pdf, 4_330_000, 102),
    named("pdf_large", Kind::Pdf, 17_344_000, 103),
    named("doc_small", Kind::Doc, 1_000_000, 104),
    named("doc_medium", Kind::Doc, 3_000_000, 105),
    named("doc_large", Kind::Doc, 12_140_000, 106),
];

const fn named(name: &'static str, kind: Kind, size: u64, seed: u64) -> NamedFile {
    NamedFile {
        name,
        doc: Document::new(kind, size, seed),
    }
}

/// The named file `name`, if there is one.
pub fn file(name: &str) -> Option<Document> {
    FILES.iter().find(|f| f.name == name).map(|f| f.doc)
}

/// Fills `buf` with bytes `offset .. offset + buf.len()` of the `(kind, seed)` stream.
///
/// Pure and deterministic: the same arguments give the same bytes on every platform and release
/// of the same [`GENERATION`].
pub fn fill(kind: Kind, seed: u64, offset: u64, buf: &mut [u8]) {
    let key = stream_key(kind, seed);
    let noise_key = mix(key ^ 0x6e6f_6973_6521_0000);
    match kind {
        Kind::Random => fill_noise(key, offset, buf),
        Kind::Pdf | Kind::Doc | Kind::Html => {
            // Noise first (whole window), then overwrite literal and letter bytes per period.
            fill_noise(noise_key, offset, buf);
            let base = Base::of(kind);
            let mut pos = offset;
            let mut done = 0;
            while done < buf.len() {
                let period = pos / PERIOD as u64;
                let within = (pos % PERIOD as u64) as usize;
                let n = (PERIOD - within).min(buf.len() - done);
                base.apply(key, period, within, &mut buf[done..done + n]);
                done += n;
                pos += n as u64;
            }
        }
    }
}

fn stream_key(kind: Kind, seed: u64) -> u64 {
    mix(mix(seed ^ kind.salt()).wrapping_add(GAMMA))
}

/// Word `i` of the noise stream of `key`.
#[inline]
fn noise_word(key: u64, i: u64) -> [u8; 8] {
    mix(key.wrapping_add(i.wrapping_add(1).wrapping_mul(GAMMA))).to_le_bytes()
}

/// Bytes `offset ..` of the noise stream of `key`.
fn fill_noise(key: u64, offset: u64, buf: &mut [u8]) {
    let mut word = offset / 8;
    let skip = (offset % 8) as usize;
    let mut rest: &mut [u8] = buf;
    if skip != 0 {
        let w = noise_word(key, word);
        let n = (8 - skip).min(rest.len());
        rest[..n].copy_from_slice(&w[skip..skip + n]);
        rest = &mut rest[n..];
        word += 1;
    }
    let mut chunks = rest.chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&noise_word(key, word));
        word += 1;
    }
    let tail = chunks.into_remainder();
    if !tail.is_empty() {
        let w = noise_word(key, word);
        let n = tail.len();
        tail.copy_from_slice(&w[..n]);
    }
}

/// Byte classes of a base block.
const LITERAL: u8 = 0;
const LETTER: u8 = 1;
const NOISE: u8 = 2;
const KEYED: u8 = 3;

/// A per-kind base block: [`PERIOD`] bytes and their classes.
struct Base {
    bytes: Vec<u8>,
    class: Vec<u8>,
}

impl Base {
    fn of(kind: Kind) -> &'static Base {
        static PDF: OnceLock<Base> = OnceLock::new();
        static DOC: OnceLock<Base> = OnceLock::new();
        static HTML: OnceLock<Base> = OnceLock::new();
        match kind {
            Kind::Pdf => PDF.get_or_init(grammar::pdf),
            Kind::Doc => DOC.get_or_init(grammar::doc),
            // `random` has no base block and never gets here.
            Kind::Html | Kind::Random => HTML.get_or_init(grammar::html),
        }
    }

    /// Overwrites the literal and letter bytes of `out`, which holds bytes `within ..` of period
    /// `period` of the stream keyed `key` (noise bytes are already in place).
    fn apply(&self, key: u64, period: u64, within: usize, out: &mut [u8]) {
        let kj = mix(key ^ mix(period.wrapping_add(1)));
        let rot = if period == 0 {
            0
        } else {
            (kj % PERIOD as u64) as usize
        };
        let identity: [u8; 256] = std::array::from_fn(|i| i as u8);
        // The keyed class is XORed with one non-zero byte of the period key.
        let x = (kj >> 32) as u8 | 1;
        let tables = [
            identity,
            letter_table(kj),
            identity,
            identity.map(|b| b ^ x),
        ];
        let start = (rot + within) % PERIOD;
        // Two contiguous runs of the base block: [start, PERIOD) then [0, ..).
        let first = (PERIOD - start).min(out.len());
        let (a, b) = out.split_at_mut(first);
        self.apply_run(&tables, start, a);
        self.apply_run(&tables, 0, b);
    }

    fn apply_run(&self, tables: &[[u8; 256]; 4], from: usize, out: &mut [u8]) {
        let bytes = &self.bytes[from..from + out.len()];
        let class = &self.class[from..from + out.len()];
        for ((o, &b), &c) in out.iter_mut().zip(bytes).zip(class) {
            if c != NOISE {
                *o = tables[usize::from(c)][usize::from(b)];
            }
        }
    }
}

/// The byte map of a period: identity except for a permutation of `a..=z` (and alike of `A..=Z`).
fn letter_table(kj: u64) -> [u8; 256] {
    let mut perm: [u8; 26] = std::array::from_fn(|i| i as u8);
    let mut state = kj;
    for i in (1..26).rev() {
        state = state.wrapping_add(GAMMA);
        let j = (mix(state) % (i as u64 + 1)) as usize;
        perm.swap(i, j);
    }
    let mut table: [u8; 256] = std::array::from_fn(|i| i as u8);
    for (i, &p) in perm.iter().enumerate() {
        table[usize::from(b'a') + i] = b'a' + p;
        table[usize::from(b'A') + i] = b'A' + p;
    }
    table
}

/// The grammars that build the base blocks. Only called once per kind and process.
mod grammar {
    use super::{mix, Base, GAMMA, KEYED, LETTER, LITERAL, NOISE, PERIOD};

    /// A sequential SplitMix64 generator for building base blocks.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(GAMMA);
            mix(self.0)
        }
        /// Uniform in `0..n` (n > 0).
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        /// Uniform in `lo..=hi`.
        fn range(&mut self, lo: usize, hi: usize) -> usize {
            lo + self.below(hi - lo + 1)
        }
        fn unit(&mut self) -> f64 {
            (self.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
        }
        fn chance(&mut self, p: f64) -> bool {
            self.unit() < p
        }
        /// A skewed index in `0..n`: small indices are much more likely (Zipf-like).
        fn skewed(&mut self, n: usize) -> usize {
            let u = self.unit();
            ((u * u * u * u * n as f64) as usize).min(n - 1)
        }
    }

    /// A base block under construction.
    struct Builder {
        gen: Gen,
        words: Vec<String>,
        phrases: Vec<String>,
        repeat: f64,
        base: Base,
    }

    impl Builder {
        fn new(seed: u64, vocabulary: usize, repeat: f64) -> Self {
            let mut gen = Gen(seed);
            let words = vocabulary_of(&mut gen, vocabulary);
            Self {
                gen,
                words,
                phrases: Vec::new(),
                repeat,
                base: Base {
                    bytes: Vec::with_capacity(PERIOD + 64 * 1024),
                    class: Vec::with_capacity(PERIOD + 64 * 1024),
                },
            }
        }
        fn full(&self) -> bool {
            self.base.bytes.len() >= PERIOD
        }
        fn push(&mut self, bytes: &[u8], class: u8) {
            self.base.bytes.extend_from_slice(bytes);
            self.base
                .class
                .extend(std::iter::repeat_n(class, bytes.len()));
        }
        fn lit(&mut self, s: &str) {
            self.push(s.as_bytes(), LITERAL);
        }
        fn num(&mut self, n: usize) {
            self.push(n.to_string().as_bytes(), LITERAL);
        }
        fn num_range(&mut self, lo: usize, hi: usize) {
            let n = self.gen.range(lo, hi);
            self.num(n);
        }
        fn num_below(&mut self, n: usize) {
            let n = self.gen.below(n);
            self.num(n);
        }
        fn noise(&mut self, n: usize) {
            self.push(&vec![0; n], NOISE);
        }
        /// `n` random letters (a session token or hash): letter class, so it differs per seed.
        fn token(&mut self, n: usize) {
            let t: Vec<u8> = (0..n).map(|_| b'a' + self.gen.below(26) as u8).collect();
            self.push(&t, LETTER);
        }
        fn word(&mut self) {
            let i = self.gen.skewed(self.words.len());
            let w = std::mem::take(&mut self.words[i]);
            self.push(w.as_bytes(), LETTER);
            self.words[i] = w;
        }
        fn capital_word(&mut self) {
            let i = self.gen.skewed(self.words.len());
            let mut w = self.words[i].clone().into_bytes();
            w[0] = w[0].to_ascii_uppercase();
            self.push(&w, LETTER);
        }
        fn words(&mut self, n: usize, sep: &str) {
            for k in 0..n {
                if k > 0 {
                    self.lit(sep);
                }
                self.word();
            }
        }
        /// A sentence: fresh pseudo-words, or (with probability `repeat`) one said before, as
        /// boilerplate recurs in real documents. Letters are letter class, the rest literal.
        fn sentence(&mut self) {
            if !self.phrases.is_empty() && self.gen.chance(self.repeat) {
                let i = self.gen.skewed(self.phrases.len());
                let p = std::mem::take(&mut self.phrases[i]);
                self.text(&p);
                self.phrases[i] = p;
                return;
            }
            let mut s = String::new();
            let n = self.gen.range(6, 18);
            for k in 0..=n {
                if k > 0 {
                    if self.gen.chance(0.08) {
                        s.push(',');
                    }
                    s.push(' ');
                }
                let w = &self.words[self.gen.skewed(self.words.len())];
                if k == 0 {
                    s.push_str(&w[..1].to_ascii_uppercase());
                    s.push_str(&w[1..]);
                } else {
                    s.push_str(w);
                }
            }
            s.push('.');
            self.text(&s);
            if self.phrases.len() < 64 {
                self.phrases.push(s);
            } else if self.gen.chance(0.1) {
                let i = self.gen.below(self.phrases.len());
                self.phrases[i] = s;
            }
        }
        /// ASCII text: letters are letter class, everything else literal.
        fn text(&mut self, s: &str) {
            for &c in s.as_bytes() {
                let class = if c.is_ascii_alphabetic() {
                    LETTER
                } else {
                    LITERAL
                };
                self.base.bytes.push(c);
                self.base.class.push(class);
            }
        }
        fn finish(mut self) -> Base {
            self.base.bytes.truncate(PERIOD);
            self.base.class.truncate(PERIOD);
            self.base
        }
    }

    /// `n` distinct pseudo-words made of syllables.
    fn vocabulary_of(gen: &mut Gen, n: usize) -> Vec<String> {
        const ONSETS: [&str; 20] = [
            "b", "c", "d", "f", "g", "h", "l", "m", "n", "p", "r", "s", "t", "v", "w", "st", "tr",
            "pl", "ch", "th",
        ];
        const VOWELS: [&str; 8] = ["a", "e", "i", "o", "u", "ea", "io", "ou"];
        const CODAS: [&str; 8] = ["", "", "", "n", "r", "s", "t", "nd"];
        let mut seen = std::collections::HashSet::new();
        let mut words = Vec::with_capacity(n);
        while words.len() < n {
            let syllables = 1 + gen.skewed(4);
            let mut w = String::new();
            for _ in 0..syllables {
                w.push_str(ONSETS[gen.below(ONSETS.len())]);
                w.push_str(VOWELS[gen.below(VOWELS.len())]);
                w.push_str(CODAS[gen.below(CODAS.len())]);
            }
            if seen.insert(w.clone()) {
                words.push(w);
            }
        }
        // Short words first, so that the skewed pick favours them as in natural text.
        words.sort_by_key(|w| w.len());
        words
    }

    /// PDF-like: objects around DCT image streams (noise) and uncompressed text content streams.
    pub(super) fn pdf() -> Base {
        let mut b = Builder::new(0x7064_6600, 3000, 0.3);
        b.lit("%PDF-1.7\n");
        b.push(&[b'%', 0xe2, 0xe3, 0xcf, 0xd3, b'\n'], LITERAL);
        let mut obj = 1;
        while !b.full() {
            b.num(obj);
            b.lit(" 0 obj\n");
            obj += 1;
            if b.gen.chance(0.7) {
                let len = b.gen.range(2048, 12 * 1024);
                b.lit("<< /Type /XObject /Subtype /Image /Width ");
                b.num_range(64, 2048);
                b.lit(" /Height ");
                b.num_range(64, 2048);
                b.lit(" /ColorSpace /DeviceRGB /BitsPerComponent 8 /Filter /DCTDecode /Length ");
                b.num(len);
                b.lit(" >>\nstream\n");
                b.noise(len);
                b.lit("\nendstream\nendobj\n");
            } else if b.gen.chance(0.5) {
                b.lit("<< /Length ");
                b.num_range(300, 3000);
                b.lit(" >>\nstream\nBT\n/F1 11 Tf\n");
                let lines = b.gen.range(4, 20);
                let mut y = 760;
                for _ in 0..lines {
                    b.lit("72 ");
                    b.num(y);
                    y -= 14;
                    b.lit(" Td (");
                    b.sentence();
                    b.lit(") Tj\n");
                }
                b.lit("ET\nendstream\nendobj\n");
            } else {
                b.lit("<< /Type /Font /Subtype /Type1 /BaseFont /");
                b.capital_word();
                b.lit(" /Encoding /WinAnsiEncoding >>\nendobj\n");
            }
        }
        b.finish()
    }

    /// DOC-like: an OLE-like header, paragraphs of pseudo-word text, and sector tables.
    pub(super) fn doc() -> Base {
        let mut b = Builder::new(0x646f_6300, 1200, 0.45);
        b.push(&[0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1], LITERAL);
        b.push(&[0; 504], KEYED);
        let mut sector: u32 = 1;
        while !b.full() {
            // A few paragraphs of text.
            let paragraphs = b.gen.range(2, 6);
            for _ in 0..paragraphs {
                let sentences = b.gen.range(2, 8);
                for s in 0..sentences {
                    if s > 0 {
                        b.lit(" ");
                    }
                    b.sentence();
                }
                b.lit("\r");
            }
            // A sector table: little-endian chains, then a short run of opaque bytes.
            let entries = b.gen.range(8, 48);
            for _ in 0..entries {
                sector += 1 + b.gen.skewed(3) as u32;
                b.push(&sector.to_le_bytes(), KEYED);
            }
            b.push(&[0xff, 0xff, 0xff, 0xfe], KEYED);
            let n = b.gen.range(8, 96);
            b.noise(n);
            let zeros = b.gen.range(0, 64);
            b.push(&vec![0; zeros], KEYED);
        }
        b.finish()
    }

    /// HTML: a page of nested lists, links, paragraphs, images and inline styles.
    pub(super) fn html() -> Base {
        const CLASSES: [&str; 6] = ["item", "nav", "content", "card", "title", "meta"];
        let mut b = Builder::new(0x6874_6d6c, 1500, 0.4);
        b.lit("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>");
        b.words(5, " ");
        b.lit("</title>\n</head>\n<body>\n");
        while !b.full() {
            let class = CLASSES[b.gen.below(CLASSES.len())];
            b.lit("<div class=\"");
            b.lit(class);
            b.lit("-");
            b.word();
            b.lit("\" id=\"");
            b.word();
            b.num_below(10_000);
            b.lit("\">\n");
            match b.gen.below(4) {
                0 => {
                    b.lit("<ul>\n");
                    for _ in 0..b.gen.range(3, 10) {
                        b.lit("<li><a href=\"/");
                        b.words(2, "/");
                        b.lit("-");
                        b.num_below(100_000);
                        b.lit(".html\" title=\"");
                        let n = b.gen.range(2, 5);
                        b.words(n, " ");
                        b.lit("\">");
                        let n = b.gen.range(1, 4);
                        b.words(n, " ");
                        b.lit("</a></li>\n");
                    }
                    b.lit("</ul>\n");
                }
                1 => {
                    b.lit("<img src=\"/img/");
                    b.word();
                    b.lit("_");
                    b.num_below(1_000_000);
                    b.lit(".jpg\" alt=\"");
                    let n = b.gen.range(2, 6);
                    b.words(n, " ");
                    b.lit("\" width=\"");
                    b.num_range(16, 1024);
                    b.lit("\" height=\"");
                    b.num_range(16, 1024);
                    b.lit("\">\n");
                    b.lit("<input type=\"hidden\" name=\"token\" value=\"");
                    b.token(16);
                    b.lit("\">\n");
                }
                2 => {
                    b.lit("<span style=\"color:#");
                    b.num_range(100_000, 999_999);
                    b.lit(";margin:");
                    b.num_below(40);
                    b.lit("px\">");
                    let n = b.gen.range(1, 6);
                    b.words(n, " ");
                    b.lit("</span>\n");
                }
                _ => {
                    for _ in 0..b.gen.range(1, 3) {
                        b.lit("<p>");
                        for _ in 0..b.gen.range(1, 4) {
                            b.sentence();
                            b.lit(" ");
                        }
                        b.lit("</p>\n");
                    }
                }
            }
            b.lit("</div>\n");
        }
        b.finish()
    }
}

#[cfg(test)]
mod tests;
