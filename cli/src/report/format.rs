//! How the report writes figures and text: terminal-safe text ([`Term`]),
//! fixed decimals in integer arithmetic ([`Dec`]), and figures rounded to
//! what they mean in CSV and JSON ([`places`], [`RoundingFormatter`]).

use std::fmt;
use std::io;

use serde_json::ser::{Formatter, PrettyFormatter};

/// Text from a record, shown on a terminal: control characters (C0, DEL,
/// C1) become `?`, so that a record cannot move the cursor, clear the
/// screen or change colours. Padding (`{:<12}`) applies.
pub(crate) struct Term<'a>(pub(crate) &'a str);

impl fmt::Display for Term<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Bytes first: C0 and DEL are single bytes, C1 characters start
        // with 0xC2 in UTF-8; most texts have none of these.
        let suspect = |b: &u8| *b < 0x20 || *b == 0x7f || *b == 0xc2;
        if !self.0.as_bytes().iter().any(suspect) || !self.0.chars().any(char::is_control) {
            return f.pad(self.0);
        }
        let shown: String = self
            .0
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        f.pad(&shown)
    }
}

pub(crate) fn opt<T: fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// Pads `text` when the format asks for a width; writes it as is (no
/// allocation) otherwise.
fn pad_with(f: &mut fmt::Formatter<'_>, text: fmt::Arguments<'_>) -> fmt::Result {
    if f.width().is_some() {
        f.pad(&text.to_string())
    } else {
        f.write_fmt(text)
    }
}

/// `{:.N}` of a figure (N = `.1`), the same digits, in integer
/// arithmetic for what a report has (non-negative, below 2^52, at most 4
/// places): the general float formatter was most of the cost of a table
/// of millions of GPU lines. Anything else goes to the formatter.
pub(crate) struct Dec(pub(crate) f64, pub(crate) usize);

impl fmt::Display for Dec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SCALE: [u128; 5] = [1, 10, 100, 1_000, 10_000];
        let (v, places) = (self.0, self.1);
        let bits = v.to_bits();
        let biased = ((bits >> 52) & 0x7ff) as i32;
        // Normal numbers in [2^-70, 2^52): v = mantissa * 2^-shift exactly.
        if v.is_sign_negative() || places >= SCALE.len() || !(-70..52).contains(&(biased - 1023)) {
            return write!(f, "{v:.places$}");
        }
        let mantissa = u128::from((bits & ((1 << 52) - 1)) | (1 << 52));
        // 52 minus the exponent: 1..=122, so the shifts below fit u128.
        let shift = (1075 - biased) as u32;
        let scaled = mantissa * SCALE[places];
        let (mut q, rest) = (scaled >> shift, scaled & ((1 << shift) - 1));
        let half = 1 << (shift - 1);
        // Round to nearest, ties to even, as the formatter does.
        if rest > half || (rest == half && q & 1 == 1) {
            q += 1;
        }
        let unit = SCALE[places];
        // Below 2^52 the integer part fits u64 (printed faster than u128).
        let (int, frac) = ((q / unit) as u64, (q % unit) as u64);
        if places == 0 {
            write!(f, "{int}")
        } else {
            write!(f, "{int}.{frac:0places$}")
        }
    }
}

/// A figure with `places` decimals, `-` when absent.
pub(crate) struct Fixed(pub(crate) Option<f64>, pub(crate) usize);

impl fmt::Display for Fixed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(v) => pad_with(f, format_args!("{}", Dec(v, self.1))),
            None => f.pad("-"),
        }
    }
}

/// Bytes in GiB, with the share of the GPU's memory when known.
pub(crate) struct Gib(pub(crate) Option<u64>, pub(crate) Option<f64>);

impl fmt::Display for Gib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        match (self.0, self.1) {
            (Some(b), Some(p)) => {
                pad_with(f, format_args!("{} GiB ({}%)", Dec(gib(b), 1), Dec(p, 0)))
            }
            (Some(b), None) => pad_with(f, format_args!("{} GiB", Dec(gib(b), 1))),
            _ => f.pad("-"),
        }
    }
}

pub(crate) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Decimals a figure keeps in CSV and JSON, by its name: kWh to 0.1 Wh,
/// joules and watts to 0.1, percentages to 0.01, seconds to the ms (the
/// records' clock); anything else to 0.001.
pub(crate) fn places(key: &str) -> usize {
    if key.ends_with("_kwh") {
        4
    } else if key.ends_with("_j") || key.ends_with("_w") || key.ends_with("_kw") {
        1
    } else if key.ends_with("_pct") {
        2
    } else {
        3
    }
}

/// `v` rounded to `places` decimals (what it means, without float noise
/// such as `611.0937808489635`).
pub(crate) fn round(v: f64, places: usize) -> f64 {
    let scale = 10f64.powi(places as i32);
    let r = (v * scale).round() / scale;
    if r.is_finite() {
        r
    } else {
        v
    }
}

/// A figure for CSV: rounded by its column's name, shortest form
/// (`611.1`, `42`), empty when absent.
pub(crate) fn csv_figure(key: &str, v: Option<f64>) -> String {
    v.map(|v| round(v, places(key)).to_string())
        .unwrap_or_default()
}

/// serde_json's pretty printer with each float rounded by the name of
/// the key it is the value of ([`places`]), as it is written: no copy of
/// the report is made.
pub(crate) struct RoundingFormatter {
    inner: PrettyFormatter<'static>,
    key: String,
    in_key: bool,
}

impl RoundingFormatter {
    pub(crate) fn new() -> Self {
        RoundingFormatter {
            inner: PrettyFormatter::new(),
            key: String::new(),
            in_key: false,
        }
    }
}

impl Formatter for RoundingFormatter {
    fn write_f64<W: ?Sized + io::Write>(&mut self, w: &mut W, v: f64) -> io::Result<()> {
        self.inner.write_f64(w, round(v, places(&self.key)))
    }
    fn begin_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.inner.begin_array(w)
    }
    fn end_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.inner.end_array(w)
    }
    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.inner.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.inner.end_array_value(w)
    }
    fn begin_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.inner.begin_object(w)
    }
    fn end_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.inner.end_object(w)
    }
    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.key.clear();
        self.in_key = true;
        self.inner.begin_object_key(w, first)
    }
    fn end_object_key<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.in_key = false;
        self.inner.end_object_key(w)
    }
    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.inner.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.inner.end_object_value(w)
    }
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        if self.in_key {
            self.key.push_str(fragment);
        }
        self.inner.write_string_fragment(w, fragment)
    }
}

/// `value` as pretty JSON with its floats rounded by their keys.
pub(crate) fn write_rounded_json<T: serde::Serialize + ?Sized>(
    out: &mut dyn io::Write,
    value: &T,
) -> io::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(&mut *out, RoundingFormatter::new());
    value.serialize(&mut ser).map_err(io::Error::other)?;
    out.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 24: CSV and JSON carried unrounded floats.
    #[test]
    fn floats_are_rounded_to_what_they_mean() {
        let v = serde_json::json!({
            "mean_power_w": 611.0937808489635,
            "energy_kwh": 0.123456789,
            "energy_j": 633.4249,
            "peak_memory_pct": 97.12345,
            "duration_s": 1.0394999,
            "gpus": [{"energy_j": 1.26}],
            "n": 3
        });
        let mut out = Vec::new();
        write_rounded_json(&mut out, &v).unwrap();
        let text = String::from_utf8(out).unwrap();
        for want in [
            "\"mean_power_w\": 611.1",
            "\"energy_kwh\": 0.1235",
            "\"energy_j\": 633.4",
            "\"peak_memory_pct\": 97.12",
            "\"duration_s\": 1.039",
            "\"energy_j\": 1.3",
            "\"n\": 3",
        ] {
            assert!(text.contains(want), "{want}\n{text}");
        }
        assert_eq!(csv_figure("mean_power_w", Some(611.0937808489635)), "611.1");
        assert_eq!(csv_figure("energy_j", Some(42.0)), "42");
        assert_eq!(csv_figure("energy_j", None), "");
    }
}
