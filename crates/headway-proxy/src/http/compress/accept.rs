//! `Accept-Encoding` (RFC 9110 §12.5.3): which of Headway's codecs a client takes, and how much
//! it wants each.
//!
//! Pure: [`Accepted::parse`] reads the header's field values, [`Accepted::choose`] picks a codec.
//! Lenient where the RFC allows it (case-insensitive codings and `q`, optional whitespace,
//! empty list elements, parameters other than `q` ignored) and strict where a mistake could
//! send a client something it refused: an element whose weight does not parse is dropped, not
//! read as `q=1`.

use headway_config::compress::Codec;

/// A weight in thousandths (RFC 9110 §12.4.2: `qvalue` has at most three decimals), 0–1000.
pub type Weight = u16;

/// The weight of each of Headway's codecs in one request's `Accept-Encoding`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Accepted {
    /// By [`Codec::index`]; 0 = not acceptable.
    weights: [Weight; 3],
}

impl Accepted {
    /// Reads every `Accept-Encoding` field value of a request (several fields are one list,
    /// RFC 9110 §5.3). No field, or an empty one, accepts no coding of ours (RFC 9110 §12.5.3
    /// lets a server send identity then; sending a coding the client never named would be
    /// unkind to old clients).
    ///
    /// A codec's weight is its own element's `q` (default 1) if it is listed — the first
    /// element naming it counts — else the `*` element's, else 0. `x-gzip` is `gzip` (RFC 9110
    /// §8.4.1.3).
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Accepted {
        // `None` until an element names the codec (or `*`), so the first one wins.
        let mut explicit: [Option<Weight>; 3] = [None; 3];
        let mut star: Option<Weight> = None;
        for value in values {
            for element in value.split(|&b| b == b',') {
                let Some((coding, weight)) = element_of(element) else {
                    continue;
                };
                let slot = match coding {
                    Coding::Codec(c) => &mut explicit[c.index()],
                    Coding::Any => &mut star,
                    Coding::Other => continue,
                };
                slot.get_or_insert(weight);
            }
        }
        let mut weights = [0; 3];
        for c in Codec::ALL {
            weights[c.index()] = explicit[c.index()].or(star).unwrap_or(0);
        }
        Accepted { weights }
    }

    /// The client's weight for `codec`, 0–1000 (0: not acceptable).
    pub fn weight(&self, codec: Codec) -> Weight {
        self.weights[codec.index()]
    }

    /// Whether the client takes any of `codecs`.
    pub fn any(&self, codecs: &[Codec]) -> bool {
        codecs.iter().any(|c| self.weight(*c) > 0)
    }

    /// The codec to use: of `order` (the server's preference, best first), the one the client
    /// weighs highest; equal weights go to the earlier in `order`. `None` when the client takes
    /// none of them.
    pub fn choose(&self, order: &[Codec]) -> Option<Codec> {
        let mut best: Option<(Codec, Weight)> = None;
        for &c in order {
            let w = self.weight(c);
            if w > 0 && best.is_none_or(|(_, bw)| w > bw) {
                best = Some((c, w));
            }
        }
        best.map(|(c, _)| c)
    }
}

/// What one list element names.
enum Coding {
    Codec(Codec),
    /// `*`: any coding not listed otherwise.
    Any,
    /// `identity`, `deflate`, `compress`, or anything else we do not produce.
    Other,
}

/// One list element: `coding [ OWS ";" OWS "q=" qvalue ]` (other parameters ignored). `None` for
/// an empty element, a coding that is not a token, or a malformed weight.
fn element_of(element: &[u8]) -> Option<(Coding, Weight)> {
    let mut parts = element.split(|&b| b == b';');
    let coding = trim(parts.next()?);
    if coding.is_empty() || !coding.iter().all(|&b| is_tchar(b)) {
        return None;
    }
    let mut weight = 1000;
    for param in parts {
        let param = trim(param);
        let Some(eq) = param.iter().position(|&b| b == b'=') else {
            // A bare parameter name: not a weight; ignore it.
            continue;
        };
        let (name, value) = (trim(&param[..eq]), trim(&param[eq + 1..]));
        if name.eq_ignore_ascii_case(b"q") {
            weight = qvalue(value)?;
        }
    }
    let coding = if coding == b"*" {
        Coding::Any
    } else if coding.eq_ignore_ascii_case(b"gzip") || coding.eq_ignore_ascii_case(b"x-gzip") {
        Coding::Codec(Codec::Gzip)
    } else if coding.eq_ignore_ascii_case(b"br") {
        Coding::Codec(Codec::Brotli)
    } else if coding.eq_ignore_ascii_case(b"zstd") {
        Coding::Codec(Codec::Zstd)
    } else {
        Coding::Other
    };
    Some((coding, weight))
}

/// RFC 9110 §12.4.2: `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`, in
/// thousandths.
fn qvalue(v: &[u8]) -> Option<Weight> {
    let (&first, rest) = v.split_first()?;
    let frac = match rest {
        [] => &[][..],
        [b'.', frac @ ..] if frac.len() <= 3 => frac,
        _ => return None,
    };
    if !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths: Weight = 0;
    for i in 0..3 {
        thousandths = thousandths * 10 + frac.get(i).map_or(0, |d| Weight::from(d - b'0'));
    }
    match first {
        b'0' => Some(thousandths),
        b'1' if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// Without leading and trailing spaces and tabs (OWS).
fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// RFC 9110 §5.6.2 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
