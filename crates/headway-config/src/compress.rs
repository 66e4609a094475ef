//! HTTP compression of a virtual server: the validated `[virtual_server.compression]` section.
//!
//! This module owns [`Compression`] (what the proxy compresses, with which codecs and levels,
//! and when the CPU bypass engages), [`Codec`], [`CpuBypass`] and the one conversion from the
//! file's [`CompressionSection`]. It checks codec names (known, each once), media-type prefixes
//! (lower-cased, `text/*` read as `text/`; never an image, audio or video type, which are
//! already compressed), level ranges, and the bypass thresholds (release below engage). It does
//! not compress anything: `headway_proxy::http::compress` does, from these values.
//!
//! Entry point: [`compression`], called by `crate::adc` for each virtual server.

use headway_core::Probability;
use toml::Spanned;

use crate::config::{invalid, ConfigError};
use crate::file::{CompressionSection, Origin};
use crate::suggest::did_you_mean;

/// A content coding Headway can produce (RFC 9110 §8.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Codec {
    /// Zstandard (RFC 8878, HTTP coding `zstd` per RFC 9659).
    Zstd,
    /// Brotli (RFC 7932, coding `br`).
    Brotli,
    /// gzip (RFC 1952, coding `gzip`).
    Gzip,
}

impl Codec {
    /// Every codec, in the default order of preference.
    pub const ALL: [Codec; 3] = [Codec::Zstd, Codec::Brotli, Codec::Gzip];

    /// The content-coding token (`zstd`, `br`, `gzip`).
    pub const fn token(self) -> &'static str {
        match self {
            Codec::Zstd => "zstd",
            Codec::Brotli => "br",
            Codec::Gzip => "gzip",
        }
    }

    /// A dense index (0, 1, 2) for per-codec tables.
    pub const fn index(self) -> usize {
        match self {
            Codec::Zstd => 0,
            Codec::Brotli => 1,
            Codec::Gzip => 2,
        }
    }

    /// The level range `(lowest, highest)` Headway accepts for the codec.
    pub const fn levels(self) -> (u32, u32) {
        match self {
            Codec::Zstd => (1, 19),
            Codec::Brotli => (0, 11),
            Codec::Gzip => (1, 9),
        }
    }

    /// The default level, chosen by measurement on the lab's HTML corpus (`cargo bench -p
    /// headway-bench -- compress`): the fastest level whose ratio is at least that of zlib's
    /// level 1, which NGINX (`gzip_comp_level 1`) and HAProxy use by default. gzip 2 (zlib-rs's
    /// level 1 is a faster but much weaker parser: 2.25:1 on 64 KiB against 2.97:1), brotli 2
    /// (qualities 0 and 1 compress each frame on its own: 2.55:1 against 3.09:1), zstd 2 (as
    /// fast as level 1 within the noise, a little smaller).
    pub const fn default_level(self) -> u32 {
        match self {
            Codec::Zstd => 2,
            Codec::Brotli => 2,
            Codec::Gzip => 2,
        }
    }
}

impl std::fmt::Display for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.token())
    }
}

/// Media types compressed when the section names none (prefixes, lower case).
pub const DEFAULT_TYPES: [&str; 15] = [
    "text/",
    "application/json",
    "application/javascript",
    "application/x-javascript",
    "application/xml",
    "application/xhtml+xml",
    "application/rss+xml",
    "application/atom+xml",
    "application/ld+json",
    "application/manifest+json",
    "application/wasm",
    "application/vnd.ms-fontobject",
    "font/ttf",
    "font/otf",
    "image/svg+xml",
];

/// Media types that are never compressed, whatever `types` says: their content is compressed
/// already (`image/svg+xml` is text and is the exception; see [`never_compressed`]).
pub const NEVER: [&str; 3] = ["image/", "audio/", "video/"];

/// Whether a media type (lower case, no parameters) is one Headway never compresses.
pub fn never_compressed(media_type: &str) -> bool {
    NEVER.iter().any(|p| media_type.starts_with(p)) && media_type != "image/svg+xml"
}

/// Default smallest `Content-Length` compressed: 1 KiB.
pub const DEFAULT_MIN_SIZE: u64 = 1024;

/// Default CPU utilisation at which the bypass engages: 90 %.
pub const DEFAULT_CPU_BYPASS: f64 = 0.9;

/// A virtual server's compression policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Compression {
    /// The codecs offered, best first; not empty, no codec twice.
    pub codecs: Vec<Codec>,
    /// Media-type prefixes compressed (lower case); not empty, none of [`NEVER`].
    pub types: Vec<String>,
    /// Responses with a smaller `Content-Length` are not compressed.
    pub min_size: u64,
    /// gzip level, 1–9.
    pub gzip_level: u32,
    /// Brotli quality, 0–11.
    pub brotli_level: u32,
    /// zstd level, 1–19.
    pub zstd_level: u32,
    /// When compression steps aside for the CPU; `None` = never.
    pub cpu_bypass: Option<CpuBypass>,
}

impl Compression {
    /// The level configured for `codec`.
    pub fn level(&self, codec: Codec) -> u32 {
        match codec {
            Codec::Zstd => self.zstd_level,
            Codec::Brotli => self.brotli_level,
            Codec::Gzip => self.gzip_level,
        }
    }
}

impl Default for Compression {
    fn default() -> Self {
        Compression {
            codecs: Codec::ALL.to_vec(),
            types: DEFAULT_TYPES.iter().map(|t| (*t).to_string()).collect(),
            min_size: DEFAULT_MIN_SIZE,
            gzip_level: Codec::Gzip.default_level(),
            brotli_level: Codec::Brotli.default_level(),
            zstd_level: Codec::Zstd.default_level(),
            cpu_bypass: Some(CpuBypass::with_default_release(
                DEFAULT_CPU_BYPASS,
                CpuSource::System,
            )),
        }
    }
}

/// The CPU bypass: hysteresis between two utilisations of one CPU source.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuBypass {
    /// Utilisation (0–1] at or above which new responses go uncompressed.
    pub engage: f64,
    /// Utilisation [0–`engage`) below which compression resumes.
    pub release: f64,
    /// Whose CPU is measured.
    pub source: CpuSource,
}

impl CpuBypass {
    /// Engaging at `engage`, releasing 20 points lower, or at half of `engage` when that is
    /// higher.
    pub fn with_default_release(engage: f64, source: CpuSource) -> Self {
        CpuBypass {
            engage,
            release: engage - (engage / 2.0).min(0.2),
            source,
        }
    }
}

/// Whose CPU utilisation the bypass watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CpuSource {
    /// All CPUs of the machine (`/proc/stat`): busy time over all time.
    System,
    /// This process's CPU time as a share of all CPUs' time (`/proc/self/stat`).
    Process,
}

impl CpuSource {
    /// The name written in the file.
    pub const fn as_str(self) -> &'static str {
        match self {
            CpuSource::System => "system",
            CpuSource::Process => "process",
        }
    }
}

/// Validates a virtual server's `[virtual_server.compression]`; `None` when there is none or it
/// says `enabled = false`.
pub(crate) fn compression(
    section: Option<&Spanned<CompressionSection>>,
    vs: &str,
    origin: &Origin,
) -> Result<Option<Compression>, ConfigError> {
    let Some(section) = section else {
        return Ok(None);
    };
    let s = section.get_ref();
    let at = |span| origin.locate(Some(span));
    let mut out = Compression::default();
    if let Some(list) = &s.codecs {
        out.codecs.clear();
        for c in list.get_ref() {
            let codec = match c.get_ref().to_ascii_lowercase().as_str() {
                "zstd" => Codec::Zstd,
                "br" | "brotli" => Codec::Brotli,
                "gzip" => Codec::Gzip,
                other => {
                    let hint = did_you_mean(other, &["zstd", "br", "gzip"])
                        .map(|s| format!(" — did you mean `{s}`?"))
                        .unwrap_or_default();
                    return Err(invalid(
                        at(c.span()),
                        format!(
                            "virtual server `{vs}`: unknown compression codec `{other}`: use \
                             \"zstd\", \"br\" or \"gzip\"{hint}"
                        ),
                    ));
                }
            };
            if out.codecs.contains(&codec) {
                return Err(invalid(
                    at(c.span()),
                    format!("virtual server `{vs}`: codec `{codec}` is listed twice; list it once"),
                ));
            }
            out.codecs.push(codec);
        }
        if out.codecs.is_empty() {
            return Err(invalid(
                at(list.span()),
                format!(
                    "virtual server `{vs}`: `codecs` is empty: name at least one of \"zstd\", \
                     \"br\", \"gzip\", or set `enabled = false`"
                ),
            ));
        }
    }
    if let Some(list) = &s.types {
        out.types.clear();
        for t in list.get_ref() {
            let mut p = t.get_ref().trim().to_ascii_lowercase();
            if p.ends_with("/*") {
                p.pop();
            }
            let valid = p
                .split_once('/')
                .is_some_and(|(top, _)| !top.is_empty() && crate::adc::is_token(top))
                && !p.contains([';', ' ', ','])
                && !p.contains('*');
            if !valid {
                return Err(invalid(
                    at(t.span()),
                    format!(
                        "virtual server `{vs}`: `{}` is not a media type or prefix: write \
                         \"text/\" (or \"text/*\") for a whole type, \"application/json\" for \
                         one",
                        t.get_ref()
                    ),
                ));
            }
            if never_compressed(&p) || NEVER.contains(&p.as_str()) {
                return Err(invalid(
                    at(t.span()),
                    format!(
                        "virtual server `{vs}`: `{}` is already compressed: Headway never \
                         compresses image (except image/svg+xml), audio or video types; remove it",
                        t.get_ref()
                    ),
                ));
            }
            if !out.types.contains(&p) {
                out.types.push(p);
            }
        }
        if out.types.is_empty() {
            return Err(invalid(
                at(list.span()),
                format!(
                    "virtual server `{vs}`: `types` is empty: name at least one media type, or \
                     set `enabled = false`"
                ),
            ));
        }
    }
    if let Some(m) = &s.min_size {
        out.min_size = m.get_ref().bytes();
    }
    let level = |v: &Option<Spanned<u32>>, codec: Codec| -> Result<u32, ConfigError> {
        let Some(v) = v else {
            return Ok(codec.default_level());
        };
        let (lo, hi) = codec.levels();
        let n = *v.get_ref();
        if (lo..=hi).contains(&n) {
            Ok(n)
        } else {
            Err(invalid(
                at(v.span()),
                format!(
                    "virtual server `{vs}`: {codec} level {n} is out of range: use {lo} to {hi}"
                ),
            ))
        }
    };
    out.gzip_level = level(&s.gzip_level, Codec::Gzip)?;
    out.brotli_level = level(&s.brotli_level, Codec::Brotli)?;
    out.zstd_level = level(&s.zstd_level, Codec::Zstd)?;
    let source = match &s.cpu_source {
        None => CpuSource::System,
        Some(v) => match v.get_ref().as_str() {
            "system" => CpuSource::System,
            "process" => CpuSource::Process,
            other => {
                return Err(invalid(
                    at(v.span()),
                    format!(
                        "virtual server `{vs}`: unknown cpu_source `{other}`: use \"system\" or \
                         \"process\""
                    ),
                ))
            }
        },
    };
    let percent = |v: &Spanned<String>, what: &str| -> Result<f64, ConfigError> {
        match v.get_ref().parse::<Probability>() {
            Ok(p) => Ok(p.value()),
            Err(e) => Err(invalid(
                at(v.span()),
                format!("virtual server `{vs}`: {what}: {e} (write a percentage such as \"90%\")"),
            )),
        }
    };
    out.cpu_bypass = match &s.cpu_bypass {
        Some(v) if v.get_ref() == "off" => {
            if let Some(r) = &s.cpu_release {
                return Err(invalid(
                    at(r.span()),
                    format!(
                        "virtual server `{vs}`: cpu_release without a bypass (cpu_bypass = \
                         \"off\"): remove it"
                    ),
                ));
            }
            None
        }
        v => {
            let engage = match v {
                Some(v) => {
                    let e = percent(v, "cpu_bypass")?;
                    if e <= 0.0 {
                        return Err(invalid(
                            at(v.span()),
                            format!(
                                "virtual server `{vs}`: cpu_bypass must be above 0%: give a \
                                 percentage such as \"90%\", or \"off\""
                            ),
                        ));
                    }
                    e
                }
                None => DEFAULT_CPU_BYPASS,
            };
            let mut b = CpuBypass::with_default_release(engage, source);
            if let Some(r) = &s.cpu_release {
                b.release = percent(r, "cpu_release")?;
                if b.release >= b.engage {
                    return Err(invalid(
                        at(r.span()),
                        format!(
                            "virtual server `{vs}`: cpu_release {} must be below cpu_bypass {} \
                             (the gap keeps compression from flapping)",
                            r.get_ref(),
                            Probability::new(b.engage).unwrap_or(Probability::ZERO)
                        ),
                    ));
                }
            }
            Some(b)
        }
    };
    if s.enabled == Some(false) {
        return Ok(None);
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    fn parse(section: &str) -> Result<Option<Compression>, String> {
        let text = format!(
            "[[server_group]]\nname = \"g\"\n[[server_group.server]]\naddress = \"127.0.0.1:1\"\n\
             [[virtual_server]]\nname = \"web\"\nkind = \"http\"\nlisten = \"127.0.0.1:0\"\n\
             group = \"g\"\n{section}"
        );
        Config::parse(&text, "t.toml")
            .map(|c| c.adc.virtual_servers[0].compression.clone())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn an_empty_section_takes_the_defaults() {
        let c = parse("[virtual_server.compression]\n").unwrap().unwrap();
        assert_eq!(c, Compression::default());
        assert_eq!(c.codecs, [Codec::Zstd, Codec::Brotli, Codec::Gzip]);
        assert!(c.types.iter().any(|t| t == "text/"));
        let b = c.cpu_bypass.unwrap();
        assert_eq!((b.engage, b.source), (0.9, CpuSource::System));
        assert!((b.release - 0.7).abs() < 1e-9);
        assert_eq!(parse("").unwrap(), None);
        assert_eq!(
            parse("[virtual_server.compression]\nenabled = false\n").unwrap(),
            None
        );
    }

    #[test]
    fn every_field_is_read() {
        let c = parse(
            "[virtual_server.compression]\ncodecs = [\"gzip\", \"brotli\"]\n\
             types = [\"text/*\", \"Application/JSON\"]\nmin_size = \"0\"\ngzip_level = 6\n\
             brotli_level = 5\nzstd_level = 19\ncpu_bypass = \"20%\"\ncpu_source = \"process\"\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.codecs, [Codec::Gzip, Codec::Brotli]);
        assert_eq!(c.types, ["text/", "application/json"]);
        assert_eq!(c.min_size, 0);
        assert_eq!((c.level(Codec::Gzip), c.level(Codec::Brotli)), (6, 5));
        assert_eq!(c.level(Codec::Zstd), 19);
        let b = c.cpu_bypass.unwrap();
        assert_eq!(
            (b.engage, b.release, b.source),
            (0.2, 0.1, CpuSource::Process)
        );
        let off = parse("[virtual_server.compression]\ncpu_bypass = \"off\"\n")
            .unwrap()
            .unwrap();
        assert_eq!(off.cpu_bypass, None);
    }

    #[test]
    fn mistakes_are_refused_with_the_fix() {
        for (section, want) in [
            ("codecs = [\"gzp\"]", "did you mean `gzip`?"),
            ("codecs = [\"gzip\", \"gzip\"]", "listed twice"),
            ("codecs = []", "`codecs` is empty"),
            ("types = [\"image/png\"]", "already compressed"),
            ("types = [\"video/\"]", "already compressed"),
            ("types = [\"html\"]", "not a media type"),
            ("types = []", "`types` is empty"),
            ("gzip_level = 0", "gzip level 0 is out of range: use 1 to 9"),
            ("brotli_level = 12", "use 0 to 11"),
            ("zstd_level = 22", "use 1 to 19"),
            ("cpu_bypass = \"120%\"", "cpu_bypass"),
            ("cpu_bypass = \"0%\"", "must be above 0%"),
            (
                "cpu_bypass = \"50%\"\ncpu_release = \"60%\"",
                "must be below cpu_bypass",
            ),
            (
                "cpu_bypass = \"off\"\ncpu_release = \"60%\"",
                "without a bypass",
            ),
            ("cpu_source = \"host\"", "use \"system\" or \"process\""),
            ("level = 3", "unknown field"),
        ] {
            let e = parse(&format!("[virtual_server.compression]\n{section}\n")).unwrap_err();
            assert!(e.contains(want), "{section}: {e}");
            assert!(e.contains("t.toml:"), "{e}");
        }
        let e = parse("[virtual_server.compression]\n")
            .map(|_| ())
            .and_then(|()| {
                let text = "[[server_group]]\nname = \"g\"\n[[server_group.server]]\n\
                        address = \"127.0.0.1:1\"\n[[virtual_server]]\nname = \"l4\"\n\
                        kind = \"tcp\"\nlisten = \"127.0.0.1:0\"\ngroup = \"g\"\n\
                        [virtual_server.compression]\n";
                Config::parse(text, "t.toml")
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
            .unwrap_err();
        assert!(
            e.contains("`compression` is for HTTP virtual servers"),
            "{e}"
        );
    }

    #[test]
    fn image_audio_and_video_are_never_compressed_but_svg_is_text() {
        assert!(never_compressed("image/png"));
        assert!(never_compressed("video/mp4"));
        assert!(never_compressed("audio/ogg"));
        assert!(!never_compressed("image/svg+xml"));
        assert!(!never_compressed("text/html"));
        assert!(DEFAULT_TYPES.iter().all(|t| !never_compressed(t)));
    }
}
