//! Property tests: any time stamp form around a real record (every
//! util-linux `dmesg` form, alone or several at once, with the caller id,
//! kmsg, syslog and journalctl, in any language, readable or not) yields
//! the event the record alone yields; the stamp read is the one written,
//! or time unknown when it cannot be read.

use proptest::prelude::*;

use gpu_health_core::snapshot::NodeSnapshot;
use gpu_health_core::xid::{
    parse_line, read_since, Origin, Stamp, TimeContext, XidConfig, XidEvent,
};

/// 2026-11-29T14:30:00Z
const NOW_MS: u64 = 1_795_962_600_000;

/// Real records, as the driver prints them.
const RECORDS: [&str; 8] = [
    "NVRM: Xid (PCI:0000:18:00): 79, pid=2210, name=python3, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:3b:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No",
    "NVRM: Xid (PCI:0000:c1:00 GPU-I:01 GPU-CI:02): 13, pid='<unknown>', name=<unknown>, Graphics Exception",
    "nvidia-nvswitch3: SXid (PCI:0000:a9:00.0): 20034, Fatal, Link 30 LTSSM Fault Up",
    "nvidia-nvswitch3: SXid (PCI:0000:a9:00.0): 22013, Data {0x00000000, 0x00100000}",
    "NVRM: GPU 0000:b3:00.0: GPU has fallen off the bus.",
    "NVRM: The NVIDIA GPU 0000:b3:00.0 installed in this system has fallen off the bus and is not responding to commands.",
    "NVRM: Xid (PCI:0000:18:00): 154, pid=1, name=a, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
];

/// Month words: English, other locales' (`%b`), and words known nowhere.
const MONTHS: [(&str, Option<u8>); 14] = [
    ("Nov", Some(11)),
    ("Jan", Some(1)),
    ("kwi", Some(4)),
    ("Mär", Some(3)),
    ("déc.", Some(12)),
    ("févr.", Some(2)),
    ("апр", Some(4)),
    ("11月", Some(11)),
    ("4월", Some(4)),
    ("Okt", Some(10)),
    ("Απρ", None),
    ("xyz", None),
    ("Foo.", None),
    ("13月", None),
];

/// A wall time, with fields that may be out of range.
#[derive(Debug, Clone, Copy)]
struct Civil {
    year: i32,
    month: usize,
    day: u8,
    hour: u8,
    min: u8,
    sec: u8,
    us: u32,
}

fn civil() -> impl Strategy<Value = Civil> {
    (
        1990i32..2040,
        0..MONTHS.len(),
        prop_oneof![4 => 1u8..=28, 1 => 0u8..=40],
        prop_oneof![4 => 0u8..24, 1 => 0u8..=99],
        prop_oneof![4 => 0u8..60, 1 => 0u8..=99],
        prop_oneof![4 => 0u8..60, 1 => 0u8..=99],
        0u32..1_000_000,
    )
        .prop_map(|(year, month, day, hour, min, sec, us)| Civil {
            year,
            month,
            day,
            hour,
            min,
            sec,
            us,
        })
}

impl Civil {
    fn clock(&self) -> String {
        format!("{:02}:{:02}:{:02}", self.hour, self.min, self.sec)
    }
    fn month_word(&self) -> &'static str {
        MONTHS[self.month].0
    }
    /// The stamp as written, when its month is one known here.
    fn local(&self, year: Option<i32>, ms: u16) -> Stamp {
        match MONTHS[self.month].1 {
            Some(month) => Stamp::Local {
                year,
                month,
                day: self.day,
                hour: self.hour,
                min: self.min,
                sec: self.sec,
                ms,
            },
            None => Stamp::None,
        }
    }
}

/// One time stamp as some source writes it, and the stamp it stands for.
#[derive(Debug, Clone)]
struct Written {
    text: String,
    stamp: Stamp,
}

/// `dmesg`'s bracketed and ISO stamps (one `--time-format` each).
fn dmesg_stamp() -> impl Strategy<Value = Written> {
    let raw = (0u64..100_000_000, 0u32..1_000_000).prop_map(|(s, f)| Written {
        text: format!("[{s:5}.{f:06}]"),
        stamp: Stamp::Monotonic {
            us: s * 1_000_000 + u64::from(f),
        },
    });
    let raw_delta = (0u64..100_000, 0u32..1_000_000, 0u32..100_000).prop_map(|(s, f, d)| Written {
        text: format!("[{s:5}.{f:06} <{:12.6}>]", f64::from(d) / 1e6),
        stamp: Stamp::Monotonic {
            us: s * 1_000_000 + u64::from(f),
        },
    });
    let weekdays = prop::sample::select(vec!["Sun", "Tue", "wto", "Di", "Τρ", "日"]);
    let ctime = (civil(), weekdays, any::<bool>()).prop_map(|(c, wd, delta)| {
        let delta = if delta { " <    0.000001>" } else { "" };
        Written {
            text: format!(
                "[{wd} {} {:>2} {} {}{delta}]",
                c.month_word(),
                c.day,
                c.clock(),
                c.year
            ),
            stamp: c.local(Some(c.year), 0),
        }
    });
    let reltime = prop_oneof![
        civil().prop_map(|c| Written {
            text: format!(
                "[{}{:>2} {:02}:{:02}]",
                c.month_word(),
                c.day,
                c.hour,
                c.min
            ),
            stamp: Civil { sec: 0, ..c }.local(None, 0),
        }),
        (0u32..100_000_000).prop_map(|d| Written {
            text: if d < 10_000_000 {
                format!("[  {:+8.6}]", f64::from(d) / 1e6)
            } else {
                format!("[ {:+9.6}]", f64::from(d) / 1e6)
            },
            stamp: Stamp::None,
        }),
    ];
    let delta = (0u32..100_000_000).prop_map(|d| Written {
        text: format!("[<{:12.6}>]", f64::from(d) / 1e6),
        stamp: Stamp::None,
    });
    prop_oneof![raw, raw_delta, ctime, reltime, delta, iso_stamp(',')]
}

/// An ISO 8601 stamp: `dmesg --time-format iso` writes `,` before the
/// microseconds, syslog `.`.
fn iso_stamp(comma: char) -> impl Strategy<Value = Written> {
    let zones = prop::sample::select(vec![
        ("+00:00", Some(0i64)),
        ("Z", Some(0)),
        ("+01:00", Some(60)),
        ("-05:30", Some(-330)),
        ("+0200", Some(120)),
        ("", None),
        ("+1", Some(9999)),
    ]);
    (civil(), zones).prop_map(move |(c, (zone, offset))| {
        let month = MONTHS[c.month].1.unwrap_or(13);
        let text = format!(
            "{:04}-{month:02}-{:02}T{},{:06}{zone}",
            c.year,
            c.day,
            c.clock(),
            c.us
        )
        .replace(',', &comma.to_string());
        let ms = (c.us / 1000) as u16;
        let local = Stamp::Local {
            year: Some(c.year),
            month,
            day: c.day,
            hour: c.hour,
            min: c.min,
            sec: c.sec,
            ms,
        };
        let stamp = match offset {
            None => local,
            Some(9999) => Stamp::None,
            Some(off) if valid(&c, month) => Stamp::Unix {
                ms: utc_ms(c.year, month, c.day, c.hour, c.min, c.sec) - off * 60_000
                    + i64::from(ms),
            },
            Some(_) => Stamp::None,
        };
        Written { text, stamp }
    })
}

fn valid(c: &Civil, month: u8) -> bool {
    let days = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    (1..=12).contains(&month)
        && c.day >= 1
        && c.day <= days[usize::from(month) - 1]
        && !(month == 2 && c.day == 29 && c.year % 4 != 0)
        && c.hour < 24
        && c.min < 60
        && c.sec <= 60
}

fn utc_ms(y: i32, mo: u8, d: u8, h: u8, mi: u8, s: u8) -> i64 {
    let (y, m) = if mo <= 2 {
        (i64::from(y) - 1, i64::from(mo) + 9)
    } else {
        (i64::from(y), i64::from(mo) - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + i64::from(d) - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    (days * 86_400 + i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(s)) * 1000
}

/// A whole wrapper: the prefix of a line, who could have written it, and
/// its stamp when there is exactly one.
#[derive(Debug, Clone)]
struct Wrapper {
    prefix: String,
    origin: Origin,
    stamp: Option<Stamp>,
}

fn wrapper() -> impl Strategy<Value = Wrapper> {
    let kernel = |prefix: String, stamp| Wrapper {
        prefix,
        origin: Origin::Kernel,
        stamp,
    };
    let kmsg = (
        0u8..8,
        0u64..1_000_000,
        prop_oneof![
            (0u64..u64::MAX / 2).prop_map(|us| (us.to_string(), Stamp::Monotonic { us })),
            Just(("junk".to_string(), Stamp::None)),
            Just(("99999999999999999999".to_string(), Stamp::None)),
        ],
    )
        .prop_map(move |(prio, seq, (usec, stamp))| {
            kernel(format!("{prio},{seq},{usec},-;"), Some(stamp))
        });
    let levels = prop::sample::select(vec![
        "emerg", "alert", "crit", "err", "warn", "notice", "info", "debug",
    ]);
    let dmesg = (
        prop::option::of(levels),
        prop::collection::vec(dmesg_stamp(), 0..3),
        prop::option::of((prop::sample::select(vec!['T', 'C']), 0u32..99_999)),
    )
        .prop_map(move |(level, stamps, caller)| {
            let mut prefix = String::new();
            if let Some(level) = level {
                prefix.push_str(&format!("{:<6}:{level:<6}: ", "kern"));
            }
            for s in &stamps {
                prefix.push_str(&s.text);
                prefix.push(' ');
            }
            if let Some((kind, n)) = caller {
                prefix.push_str(&format!("[{:>6}] ", format!("{kind}{n}")));
            }
            let stamp = match stamps.as_slice() {
                [] => Some(Stamp::None),
                [one] => Some(one.stamp),
                _ => None,
            };
            kernel(prefix, stamp)
        });
    let raw = (0u8..8, dmesg_stamp())
        .prop_map(move |(prio, s)| kernel(format!("<{prio}>{} ", s.text), Some(s.stamp)));
    let syslog = (civil(), any::<bool>()).prop_map(|(c, kernel_stamp)| {
        let kept = if kernel_stamp { "[  812.345678] " } else { "" };
        Wrapper {
            prefix: format!(
                "{} {:>2} {} gpu017 kernel: {kept}",
                c.month_word(),
                c.day,
                c.clock()
            ),
            origin: Origin::SyslogTag,
            stamp: Some(c.local(None, 0)),
        }
    });
    let syslog_iso = iso_stamp('.').prop_map(|s| Wrapper {
        prefix: format!("{} gpu017 kernel: ", s.text),
        origin: Origin::SyslogTag,
        stamp: Some(s.stamp),
    });
    prop_oneof![kmsg, dmesg, raw, syslog, syslog_iso]
}

/// The time a stamp stands for, where it can be known.
fn resolved(stamp: &Stamp) -> Option<i64> {
    TimeContext {
        boot_ms: Some(1_700_000_000_000),
        now_ms: NOW_MS as i64,
    }
    .resolve(stamp)
}

/// What an event says, but its time.
fn said(e: &XidEvent) -> (String, u32, Option<String>, Option<u32>, String, bool) {
    (
        e.label(),
        e.code,
        e.pci.clone(),
        e.gpu_instance,
        e.message.clone(),
        e.fallen_off_bus,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// The record's payload is the record's, whatever wraps it; the kind
    /// of source decides who could have written it; the stamp read is the
    /// one written, or time unknown.
    #[test]
    fn any_stamp_form_yields_the_records_event(record in 0..RECORDS.len(), w in wrapper()) {
        let bare = parse_line(RECORDS[record].as_bytes()).unwrap();
        let line = format!("{}{}", w.prefix, RECORDS[record]);
        let read = parse_line(line.as_bytes());
        prop_assert!(read.is_some(), "{}", line);
        let read = read.unwrap();
        prop_assert_eq!(&read.payload, &bare.payload, "{}", line);
        prop_assert_eq!(read.origin, w.origin, "{}", line);
        if let Some(stamp) = w.stamp {
            prop_assert_eq!(resolved(&read.stamp), resolved(&stamp), "{}: {:?}", line, read.stamp);
        }
    }

}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Through the file reader: the events of a log whose records carry
    /// any stamps are those of the records alone, and reading again from
    /// the cursor finds nothing new.
    #[test]
    fn a_log_of_any_stamps_reads_as_its_records(
        lines in prop::collection::vec((0..RECORDS.len(), wrapper()), 1..10),
    ) {
        let cfg = XidConfig { syslog_may_drain: true, ..XidConfig::default() };
        let snap = NodeSnapshot::default();
        let dir = tempfile::tempdir().unwrap();
        let (wrapped, bare) = (dir.path().join("wrapped.log"), dir.path().join("bare.log"));
        let text = |wrap: bool| -> String {
            lines
                .iter()
                .map(|(r, w)| format!("{}{}\n", if wrap { w.prefix.as_str() } else { "" }, RECORDS[*r]))
                .collect()
        };
        std::fs::write(&wrapped, text(true)).unwrap();
        std::fs::write(&bare, text(false)).unwrap();
        let a = read_since(&wrapped, None, &cfg, &snap, NOW_MS).unwrap();
        let b = read_since(&bare, None, &cfg, &snap, NOW_MS).unwrap();
        let said_all = |ev: &[XidEvent]| ev.iter().map(said).collect::<Vec<_>>();
        prop_assert_eq!(said_all(&a.events), said_all(&b.events));
        let again = read_since(&wrapped, a.cursor.as_ref(), &cfg, &snap, NOW_MS).unwrap();
        prop_assert!(again.events.is_empty());
    }
}

/// Records of a facility other than `kern`, in every form that prints
/// the facility, are never the driver's.
#[test]
fn other_facilities_are_not_the_kernels() {
    let record = RECORDS[0];
    for facility in [
        "user", "mail", "daemon", "auth", "syslog", "authpriv", "local0", "local7",
    ] {
        for stamp in [
            "",
            "[  12.5] ",
            "2025-01-21T04:41:44,283302+00:00 ",
            "[Tue Jan 21 04:41:44 2025] ",
        ] {
            let line = format!("{facility:<6}:warn  : {stamp}{record}");
            assert!(parse_line(line.as_bytes()).is_none(), "{line}");
        }
    }
    for prio in [8, 11, 14, 191] {
        let line = format!("<{prio}>[  12.5] {record}");
        assert!(parse_line(line.as_bytes()).is_none(), "{line}");
        let line = format!("{prio},5,12500000,-;{record}");
        assert!(parse_line(line.as_bytes()).is_none(), "{line}");
    }
}
