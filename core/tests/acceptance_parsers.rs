//! The acceptance gates' parsers against recorded outputs in the tools'
//! real formats (core/tests/fixtures/acceptance/README.md says where each
//! format comes from): every variant, garbage, truncation, huge output.

use std::path::PathBuf;

use gpu_health_core::acceptance::{nccl, nvbandwidth, perftest};

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/acceptance")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn all_reduce_table_gives_the_largest_sizes_bus_bandwidth() {
    let run = nccl::parse(&fixture("nccl/h100x8-good.txt")).unwrap();
    assert_eq!(run.rows.len(), 4);
    assert_eq!(run.rows[3].bytes, 8_589_934_592);
    assert_eq!(run.rows[3].busbw_out, 481.02);
    assert_eq!(run.rows[3].busbw_in, 481.98);
    assert_eq!(run.peak_busbw(), Some(481.98));
    assert_eq!(run.avg_busbw, Some(465.703));
    assert_eq!(run.out_of_bounds, Some(0));
    assert_eq!(run.wrong(), 0);
}

#[test]
fn all_reduce_wrong_results_are_counted() {
    let run = nccl::parse(&fixture("nccl/h100x8-wrong.txt")).unwrap();
    assert_eq!(run.wrong(), 3);
    assert_eq!(run.out_of_bounds, Some(3));
    // Good bandwidth all the same.
    assert_eq!(run.peak_busbw(), Some(481.98));
}

#[test]
fn all_reduce_without_validation_has_no_wrong_count() {
    let run = nccl::parse(&fixture("nccl/h100x8-no-validation.txt")).unwrap();
    assert!(run.rows.iter().all(|r| r.wrong.is_none()));
    assert_eq!(run.wrong(), 0);
    assert_eq!(run.peak_busbw(), Some(481.98));
}

#[test]
fn all_reduce_per_iteration_columns_are_read_by_the_header() {
    let run = nccl::parse(&fixture("nccl/h100x8-per-iteration.txt")).unwrap();
    assert_eq!(run.rows.len(), 4);
    assert_eq!(run.peak_busbw(), Some(481.98));
    assert_eq!(run.rows[0].wrong, Some(0));
}

#[test]
fn all_reduce_of_old_releases_with_an_error_column() {
    let run = nccl::parse(&fixture("nccl/a100x8-old-error-column.txt")).unwrap();
    assert_eq!(run.rows.len(), 4);
    assert_eq!(run.rows[3].busbw_out, 233.40);
    assert_eq!(run.wrong(), 0);
    // A difference beyond float's tolerance for 8 ranks (7e-05) failed.
    let bad = fixture("nccl/a100x8-old-error-column.txt").replacen("0e+00", "3e-02", 1);
    assert_eq!(nccl::parse(&bad).unwrap().wrong(), 1);
}

/// Issue 36: up to nccl-tests 2.11 the `error` column is the largest
/// difference, a failed check only beyond `DeltaMaxValue(type) *
/// (nranks - 1)`: a healthy run's `2e-07` is no wrong result.
#[test]
fn the_old_error_column_is_judged_with_nccl_tests_tolerance() {
    let real = fixture("nccl/k80x4-error-column-azureml.txt");
    let run = nccl::parse(&real).unwrap();
    assert_eq!(run.rows.len(), 7);
    assert_eq!(run.wrong(), 0, "2e-07 is within 1e-05 * 3");
    assert_eq!(run.peak_busbw(), Some(2.56));
    // Float, 4 ranks: 3e-05 is the limit, 4e-05 beyond it (in-place too).
    let at = |from: &str, to: &str, n| nccl::parse(&real.replacen(from, to, n)).unwrap().wrong();
    assert_eq!(at("2e-07", "3e-05", 2), 0);
    assert_eq!(at("2e-07", "4e-05", 1), 1);
    assert_eq!(at("2.53  2e-07\n", "2.53  5e-05\n", 1), 1, "in-place");
    // The tolerance is the row's type's: half allows 1e-02 per rank.
    let half = fixture("nccl/a100x8-old-error-column.txt").replace("float", " half");
    let at = |v: &str| nccl::parse(&half.replacen("0e+00", v, 1)).unwrap().wrong();
    assert_eq!((at("7e-02"), at("8e-02")), (0, 1));
    // Without `# Rank` lines the ranks are nThread x nGpus.
    let one = real
        .lines()
        .filter(|l| !l.starts_with("#   Rank  "))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(
        nccl::parse(&one).unwrap().wrong(),
        14,
        "1 rank: any difference"
    );
}

#[test]
fn out_of_bounds_failed_and_nccl_errors_fail_in_both_versions() {
    for name in [
        "nccl/k80x4-error-column-azureml.txt",
        "nccl/h100x8-good.txt",
    ] {
        let text = fixture(name).replace(
            "Out of bounds values : 0 OK",
            "Out of bounds values : 3 FAILED",
        );
        assert_eq!(nccl::parse(&text).unwrap().wrong(), 3, "{name}");
        // An error after some rows ends the run: never read as a result.
        let text = fixture(name).replacen(
            "# Out of bounds",
            "gpu017: Test NCCL failure common.cu:1279 'unhandled system error'\n# Out of bounds",
            1,
        );
        let e = nccl::parse(&text).unwrap_err().to_string();
        assert!(
            e.contains("Test NCCL failure common.cu:1279"),
            "{name}: {e}"
        );
    }
}

#[test]
fn mpirun_tagged_output_is_read_as_the_plain_one() {
    let plain = fixture("nccl/h100x8-good.txt");
    let tagged: String = plain
        .lines()
        .map(|l| format!("[1,0]<stdout>:{l}\n"))
        .collect();
    assert_eq!(nccl::parse(&tagged).unwrap(), nccl::parse(&plain).unwrap());
}

#[test]
fn all_reduce_cut_before_its_summary_is_not_read() {
    let e = nccl::parse(&fixture("nccl/h100x8-truncated.txt")).unwrap_err();
    assert!(e.to_string().contains("ends before its summary"), "{e}");
}

#[test]
fn all_reduce_garbage_is_an_error_never_a_panic() {
    for text in [
        fixture("nccl/cuda-error.txt"),
        String::new(),
        "\u{0}\u{1}binary\n\n#\n# size\n 12 x y\n".into(),
        "  8589934592  2147483648  float  sum  -1  1  2  nan  0  1  2  inf  0\n# Avg bus bandwidth : 3\n".into(),
        "  8589934592  2147483648  float  sum  -1  1  2\n".into(),
        "# Avg bus bandwidth : 465\n".into(),
    ] {
        assert!(nccl::parse(&text).is_err(), "{text:?}");
    }
}

#[test]
fn h2d_matrix_gives_each_gpu_and_the_slowest() {
    let m = nvbandwidth::parse(&fixture("nvbandwidth/h2d-h100x8-good.txt")).unwrap();
    assert_eq!(m.test.as_deref(), Some("host_to_device_memcpy_ce"));
    assert_eq!(m.per_gpu.len(), 8);
    assert_eq!(m.per_gpu[1], (1, 55.61));
    assert_eq!(m.min(), Some((6, 55.6)));
    assert!(m.sum.is_some());
    let slow = nvbandwidth::parse(&fixture("nvbandwidth/h2d-h100x8-gpu3-slow.txt")).unwrap();
    assert_eq!(slow.min(), Some((3, 26.04)));
}

#[test]
fn h2d_pairs_not_measured_are_left_out() {
    let m = nvbandwidth::parse(&fixture("nvbandwidth/h2d-h100x8-na.txt")).unwrap();
    assert_eq!(m.per_gpu.len(), 7);
    assert!(m.per_gpu.iter().all(|(g, _)| *g != 2));
}

#[test]
fn h2d_waived_truncated_and_garbage_are_errors() {
    for (name, why) in [
        ("nvbandwidth/h2d-waived.txt", "waived"),
        ("nvbandwidth/h2d-truncated.txt", "SUM"),
        ("nvbandwidth/garbage.txt", "no nvbandwidth matrix"),
    ] {
        let e = nvbandwidth::parse(&fixture(name)).unwrap_err().to_string();
        assert!(e.contains(why), "{name}: {e}");
    }
    let ragged = fixture("nvbandwidth/h2d-h100x8-good.txt").replace("     55.63\n", "\n");
    assert!(nvbandwidth::parse(&ragged).is_err());
    let not_a_number = fixture("nvbandwidth/h2d-h100x8-good.txt").replacen("55.61", "fast", 1);
    assert!(nvbandwidth::parse(&not_a_number).is_err());
}

#[test]
fn perftest_units_all_come_out_in_gbits() {
    let g = perftest::parse(&fixture("perftest/write_bw-ndr-gbits.txt")).unwrap();
    assert_eq!(g.rows.len(), 1);
    assert_eq!(g.best_average_gbps(), Some(392.44));
    assert_eq!(g.rows[0].peak_gbps, 392.81);
    // MiB/s (2^20 bytes): 46784.20 MiB/s = 392.45 Gb/s.
    let m = perftest::parse(&fixture("perftest/write_bw-ndr-mib.txt")).unwrap();
    let avg = m.best_average_gbps().unwrap();
    assert!((avg - 392.45).abs() < 0.01, "{avg}");
    // Before perftest 4.5 the same unit was labelled MB/sec.
    let old = perftest::parse(&fixture("perftest/send_bw-hdr-mb-old.txt")).unwrap();
    let avg = old.best_average_gbps().unwrap();
    assert!((avg - 196.09).abs() < 0.01, "{avg}");
}

#[test]
fn perftest_all_sizes_takes_the_best_average() {
    let run = perftest::parse(&fixture("perftest/write_bw-ndr-all-sizes-gbits.txt")).unwrap();
    assert_eq!(run.rows.len(), 23);
    assert_eq!(run.best_average_gbps(), Some(392.0));
}

#[test]
fn perftest_truncated_and_failed_outputs_are_errors() {
    for (name, why) in [
        ("perftest/write_bw-truncated.txt", "no perftest result row"),
        ("perftest/connect-failed.txt", "no perftest result header"),
    ] {
        let e = perftest::parse(&fixture(name)).unwrap_err().to_string();
        assert!(e.contains(why), "{name}: {e}");
    }
    let bad_unit = fixture("perftest/write_bw-ndr-gbits.txt").replace("Gb/sec", "furlongs");
    assert!(perftest::parse(&bad_unit).is_err());
    let cut_row = fixture("perftest/write_bw-ndr-gbits.txt").replace("392.44", "");
    let cut_row = cut_row.replace("0.748520", "");
    assert!(perftest::parse(&cut_row).is_err());
}

/// A tool gone mad: the parsers read a bounded number of lines and do not
/// fall over on megabytes of noise (the tier keeps at most
/// `acceptance::MAX_OUTPUT` bytes of any output).
#[test]
fn huge_outputs_are_read_within_bounds() {
    let noise = "NCCL INFO something happened on channel 00\n".repeat(300_000);
    let t0 = std::time::Instant::now();
    assert!(nccl::parse(&format!("{noise}{}", fixture("nccl/h100x8-good.txt"))).is_err());
    assert!(nvbandwidth::parse(&noise).is_err());
    assert!(perftest::parse(&noise).is_err());
    let long_line = "9".repeat(5 << 20);
    assert!(nccl::parse(&long_line).is_err());
    assert!(perftest::parse(&long_line).is_err());
    assert!(t0.elapsed() < std::time::Duration::from_secs(30));
}
