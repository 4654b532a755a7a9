//! The one Xid table against the catalog it follows: NVIDIA's Xid catalog
//! as published on 2025-10-29 (tests/fixtures/xid-catalog/, its codes,
//! whether each is in use, and each one's immediate resolution bucket).

use std::collections::BTreeSet;

use gpu_health_core::xid::{
    entry, markdown_table, DefaultAction, PolicyAction, Resolution, CATALOG, CATALOG_REFERENCE,
};

/// One row of the reference: code, in use, NVIDIA's immediate resolution.
struct Reference {
    code: u32,
    in_use: bool,
    bucket: String,
}

fn reference() -> Vec<Reference> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/xid-catalog/nvidia-2025-10-29.csv");
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Reference {
                code: f[0].parse().unwrap(),
                in_use: f[1] == "yes",
                bucket: f[2].to_string(),
            }
        })
        .collect()
}

/// The table's word for one of NVIDIA's buckets.
fn resolution_of(bucket: &str) -> Resolution {
    match bucket {
        "RESTART_APP" => Resolution::RestartApp,
        "IGNORE" => Resolution::Ignore,
        "RESET_GPU" => Resolution::ResetGpu,
        "RESTART_BM" => Resolution::RebootNode,
        "RESTART_VM" => Resolution::RestartVm,
        "CHECK_MECHANICALS" => Resolution::CheckMechanicals,
        "UPDATE_SWFW" => Resolution::UpdateSoftware,
        "CHECK_UVM" => Resolution::CheckUvm,
        "XID_154" => Resolution::FollowRecoveryAction,
        "CONTACT_SUPPORT" => Resolution::ContactSupport,
        "" => Resolution::NotGiven,
        b if b.starts_with("WORKFLOW_") => Resolution::Workflow,
        other => panic!("a bucket the table has no word for: {other}"),
    }
}

#[test]
fn the_table_has_every_code_of_the_reference_catalog_and_only_those() {
    let reference = reference();
    assert_eq!(reference.len(), 172, "codes 1-172");
    let in_use: BTreeSet<u32> = reference
        .iter()
        .filter(|r| r.in_use)
        .map(|r| r.code)
        .collect();
    let table: BTreeSet<u32> = CATALOG.iter().map(|e| e.code).collect();
    let missing: Vec<_> = in_use.difference(&table).collect();
    let extra: Vec<_> = table.difference(&in_use).collect();
    assert!(
        missing.is_empty(),
        "codes of the catalog not in the table: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "codes the catalog lists as unused: {extra:?}"
    );
    assert_eq!(in_use.len(), 109);
    assert!(
        CATALOG_REFERENCE.contains("2025-10-29") && CATALOG_REFERENCE.contains("109 codes"),
        "the table names the catalog it follows: {CATALOG_REFERENCE}"
    );
    assert!(markdown_table().starts_with(&format!("109 codes, every one of {CATALOG_REFERENCE}")));
}

#[test]
fn each_row_has_nvidias_bucket() {
    for r in reference().iter().filter(|r| r.in_use) {
        let e = entry(r.code).unwrap();
        assert_eq!(
            e.resolution,
            resolution_of(&r.bucket),
            "Xid {}: NVIDIA's bucket is {:?}",
            r.code,
            r.bucket
        );
    }
}

/// A default that is not NVIDIA's bucket read plainly says why.
#[test]
fn defaults_read_the_bucket_plainly_or_say_why() {
    for e in CATALOG {
        let plain = match e.resolution {
            Resolution::RestartApp | Resolution::UpdateSoftware => Some(PolicyAction::Warn),
            Resolution::Ignore => Some(PolicyAction::Info),
            Resolution::ResetGpu | Resolution::RebootNode => Some(PolicyAction::Drain),
            Resolution::FollowRecoveryAction => None,
            _ => None,
        };
        let plainly = match (e.default, plain) {
            (DefaultAction::Fixed(a), Some(p)) => a == p,
            _ => false,
        };
        assert!(
            plainly || !e.why.is_empty(),
            "Xid {}: default {:?} for {:?} without a reason",
            e.code,
            e.default,
            e.resolution
        );
    }
}

/// The codes the issue found missing, with the defaults their buckets call for.
#[test]
fn engine_codes_nvidia_lists_have_their_rows() {
    let warn = [
        39, 40, 41, 70, 71, 72, 75, 76, 77, 85, 126, 127, 128, 129, 130, 131, 132, 133, 134, 135,
        82, 83, 84, 88, 89, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 86, 139, 142,
    ];
    for code in warn {
        let e = entry(code).unwrap_or_else(|| panic!("Xid {code}"));
        assert_eq!(
            e.default,
            DefaultAction::Fixed(PolicyAction::Warn),
            "Xid {code}"
        );
    }
    assert_eq!(entry(142).unwrap().resolution, Resolution::ContactSupport);
    for code in [106, 107, 152, 153] {
        let e = entry(code).unwrap_or_else(|| panic!("Xid {code}"));
        assert_eq!(
            e.default,
            DefaultAction::Fixed(PolicyAction::Info),
            "Xid {code}"
        );
    }
}
