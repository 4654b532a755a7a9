//! build.rs's reading of Slurm's headers, on excerpts of the real ones
//! (22.05 has no failure mode; 26.05 declares it, with ESPANK_JOB_FAILURE
//! the 13th SPANK error from 3000).

use crate::build_facts::{declares_init_failure_mode, enum_value, strip_comments, version_number};

const SPANK_H_2605: &str = r#"
/*
 *   In slurmd proper, only the init(), slurmd_exit(), and
 *    job_prolog/epilog callbacks are used.
 */

extern spank_f slurm_spank_init;
extern int slurm_spank_init_failure_mode;
extern spank_f slurm_spank_job_prolog;
"#;

const SPANK_H_2205: &str = r#"
extern spank_f slurm_spank_init;
/* extern int slurm_spank_init_failure_mode; (documented, not declared) */
// int slurm_spank_init_failure_mode = ESPANK_JOB_FAILURE;
extern spank_f slurm_spank_job_prolog;
"#;

const ERRNO_H_2605: &str = r#"
#define ESPANK_SUCCESS 0
typedef enum {
	SLURM_SUCCESS =					0,
	SLURM_ERROR =					-1,
	ESLURM_FILE_UNREADABLE,

	/* SPANK errors */
	ESPANK_ERROR = 					3000,
	ESPANK_BAD_ARG,
	ESPANK_NOT_TASK,
	ESPANK_ENV_EXISTS,
	ESPANK_ENV_NOEXIST,
	ESPANK_NOSPACE,
	ESPANK_NOT_REMOTE,
	ESPANK_NOEXIST,
	ESPANK_NOT_EXECD,
	ESPANK_NOT_AVAIL,
	ESPANK_NOT_LOCAL,
	ESPANK_NODE_FAILURE,
	ESPANK_JOB_FAILURE,

	/* slurmd error codes */
	ESLURMD_KILL_TASK_FAILED =			4001,
} slurm_err_t;
"#;

#[test]
fn the_failure_mode_is_found_only_where_declared() {
    assert!(declares_init_failure_mode(SPANK_H_2605));
    assert!(!declares_init_failure_mode(SPANK_H_2205));
    assert!(!declares_init_failure_mode(
        "extern int slurm_spank_init_failure_mode_other;"
    ));
}

#[test]
fn enumerators_count_on_from_the_last_value() {
    assert_eq!(enum_value(ERRNO_H_2605, "ESPANK_ERROR"), Some(3000));
    assert_eq!(enum_value(ERRNO_H_2605, "ESPANK_NOSPACE"), Some(3005));
    assert_eq!(enum_value(ERRNO_H_2605, "ESPANK_NODE_FAILURE"), Some(3011));
    assert_eq!(enum_value(ERRNO_H_2605, "ESPANK_JOB_FAILURE"), Some(3012));
    assert_eq!(enum_value(ERRNO_H_2605, "ESLURM_FILE_UNREADABLE"), Some(0));
    assert_eq!(
        enum_value(ERRNO_H_2605, "ESLURMD_KILL_TASK_FAILED"),
        Some(4001)
    );
    assert_eq!(
        enum_value(ERRNO_H_2605, "ESPANK_SUCCESS"),
        None,
        "a #define, not an enumerator"
    );
    assert_eq!(enum_value(ERRNO_H_2605, "ESPANK_JOB"), None);
    // After a value this reading does not evaluate, nothing is guessed.
    assert_eq!(enum_value("enum { A = B + 1, C };", "C"), None);
}

#[test]
fn the_version_number_is_read_in_hex_or_decimal() {
    assert_eq!(
        version_number("#define SLURM_VERSION_NUMBER 0x1a0505\n"),
        Some(0x1a_05_05)
    );
    assert_eq!(
        version_number(
            "/* #define SLURM_VERSION_NUMBER 0x160508 */\n#define SLURM_VERSION_NUMBER 1443080\n"
        ),
        Some(1_443_080)
    );
    assert_eq!(
        version_number("#define SLURM_VERSION_STRING \"26.05.5\"\n"),
        None
    );
}

#[test]
fn comments_are_stripped_but_code_kept() {
    assert_eq!(strip_comments("a /* b */ c // d\ne"), "a   c \ne");
    assert_eq!(strip_comments("x /* never closed"), "x  ");
}
