//! The trajectories: one named regression per path an outside review found broken (each failed
//! on the code before the fix), exhaustive crash points for the rotations that matter, and
//! seeded random trajectories (proptest, shrunk to a minimal failing sequence on failure).
//! `CERTGEN_SIM_CASES=N` runs N random trajectories instead of the default (2,400).

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestRunner};

use super::*;

const S: Duration = Duration::from_secs(1);

fn overwrite() -> RunSpec {
    RunSpec {
        overwrite: true,
        ..RunSpec::default()
    }
}

fn crash(mut spec: RunSpec, after: usize) -> RunSpec {
    spec.faults.crash_after = Some(after);
    spec
}

fn plain() -> RunSpec {
    RunSpec::default()
}

fn check(start: Start, ops: &[Op]) -> Outcome {
    runtime()
        .block_on(trajectory(start, ops))
        .unwrap_or_else(|e| panic!("{start:?} {ops:?}: {e}"))
}

/// Envoy Gateway's Secrets and `certgen --overwrite`: the new CA is trusted everywhere beside
/// Envoy Gateway's before any leaf it signs is written (was: one write, new CA and leaves).
#[test]
fn migration_from_envoy_gateway_is_a_staged_rotation() {
    let out = check(Start::EnvoyGateway, &[Op::Run(overwrite())]);
    assert_eq!(out.ended[0].code, 0, "{}", out.ended[0].message);
    // Killed after any write and resumed, too.
    for n in 1..=12 {
        check(
            Start::EnvoyGateway,
            &[Op::Run(crash(overwrite(), n)), Op::Run(plain())],
        );
    }
}

/// A plain run over Envoy Gateway's Secrets writes nothing while they are valid; when one is
/// missing (or due), certgen moves to its own CA, staged (was: one write).
#[test]
fn adopting_envoy_gateway_secrets_never_breaks_them() {
    let out = check(Start::EnvoyGateway, &[Op::Run(plain())]);
    assert_eq!(out.ended[0].code, 0);
    runtime().block_on(async {
        let config = config();
        let world = World::new();
        let at = world.lock().unwrap().true_now();
        seed_envoy_gateway(&world, &config, true, at);
        let e = run(&world, &config, 1, plain()).await;
        assert_eq!(e.code, 0, "{}", e.message);
        assert!(
            world
                .lock()
                .unwrap()
                .log
                .iter()
                .all(|(r, _)| *r == usize::MAX),
            "valid Secrets of another tool are left alone"
        );
        let e = run(&world, &config, 2, overwrite()).await;
        assert_eq!(e.code, 0, "{}", e.message);
        let end = world.lock().unwrap().true_now();
        check_pairs(&world.lock().unwrap(), end).unwrap();
    });
}

/// The rotation after a leaves phase finished by a later run drops the old CA only once the
/// consumers had the delay to load the last leaf written (was: counted from the promotion).
#[test]
fn the_next_rotation_waits_for_the_last_leaf_write() {
    for n in 5..=8 {
        check(
            Start::Steady,
            &[
                Op::Run(crash(overwrite(), n)),
                Op::Advance(DELAY * 2),
                Op::Run(plain()),
                Op::Run(overwrite()),
            ],
        );
    }
}

/// A CA inside a leaf's renewBefore: a staged rotation leaves the trust phase and settles
/// (was: 32 writes, still "in progress"); and an expired CA with a pending one recovers (was:
/// exit 2 forever).
#[test]
fn a_ca_near_or_past_expiry_settles() {
    let out = check(
        Start::CaExpiresIn(20),
        &[Op::Run(plain()), Op::Run(plain())],
    );
    assert!(out.ended.iter().all(|e| e.code == 0), "{:?}", out.ended);
    check(Start::CaExpiresIn(20), &[Op::Run(overwrite())]);
    let out = check(
        Start::CaExpiresIn(100),
        &[
            Op::Run(crash(overwrite(), 1)),
            Op::Advance(Duration::from_secs(105 * 86_400)),
            Op::Run(plain()),
        ],
    );
    assert_eq!(out.ended[1].code, 0, "{}", out.ended[1].message);
    check(Start::CaExpiresIn(-3), &[Op::Run(plain())]);
    check(Start::CaExpiresIn(-3), &[Op::Run(overwrite())]);
}

/// A resumed trust phase writes only what is missing, so runs each killed after their first
/// write still finish it (was: every resume rewrote the CA Secret first, forever).
#[test]
fn runs_killed_after_one_write_still_make_progress() {
    runtime().block_on(async {
        let config = config();
        let world = World::new();
        assert_eq!(run(&world, &config, 1, plain()).await.code, 0);
        run(&world, &config, 2, crash(overwrite(), 1)).await;
        for i in 3..6 {
            run(&world, &config, i, crash(plain(), 1)).await;
        }
        let log: Vec<String> = world.lock().unwrap().log[5..]
            .iter()
            .map(|(_, n)| n.clone())
            .collect();
        // The CA Secret once, then each bundle once (in any order: they are written at once).
        assert_eq!(log.len(), 4, "{log:?}");
        assert_eq!(log[0], CA);
        let mut bundles = log[1..].to_vec();
        bundles.sort();
        assert_eq!(bundles, ["envoy", "envoy-gateway", "envoy-rate-limit"]);
        let end = world.lock().unwrap().true_now();
        check_pairs(&world.lock().unwrap(), end).unwrap();
    });
}

/// The trust→leaves gate counts from the last bundle write, made by the run that finished the
/// trust phase, not from the first one's start.
#[test]
fn the_gate_counts_from_the_last_bundle_write() {
    for n in 1..=3 {
        check(
            Start::Steady,
            &[
                Op::Run(crash(overwrite(), n)),
                Op::Advance(DELAY * 3),
                Op::Run(plain()),
            ],
        );
    }
}

/// The store's clock stepping back never opens a gate early; a pending CA that is not valid
/// yet (written while both clocks ran ahead) is not promoted before it is; with the store's
/// clock alone ahead, what is issued is valid at once (issued at the earlier clock).
#[test]
fn clock_steps_never_open_a_gate_early() {
    check(
        Start::Steady,
        &[
            Op::Run(crash(overwrite(), 2)),
            Op::ClockBack(Duration::from_secs(3600)),
            Op::Run(plain()),
        ],
    );
    for writer_too in [false, true] {
        runtime().block_on(clock_ahead_during_the_trust_phase(writer_too));
    }
}

async fn clock_ahead_during_the_trust_phase(writer_too: bool) {
    {
        let config = config();
        let world = World::new();
        assert_eq!(run(&world, &config, 1, plain()).await.code, 0);
        // The server's clock (and the writer's, with `writer_too`) runs an hour ahead while
        // the trust phase is written, then is corrected.
        world.lock().unwrap().clock_offset = time::Duration::hours(1);
        if writer_too {
            world.lock().unwrap().writer_offset = time::Duration::hours(1);
        }
        run(&world, &config, 2, crash(overwrite(), 4)).await;
        world.lock().unwrap().clock_offset = time::Duration::ZERO;
        world.lock().unwrap().writer_offset = time::Duration::ZERO;
        tokio::time::advance(DELAY * 2).await;
        let e = run(&world, &config, 3, plain()).await;
        if !writer_too {
            assert_eq!(e.code, 0, "the pending CA is valid: {}", e.message);
            let end = world.lock().unwrap().true_now();
            check_pairs(&world.lock().unwrap(), end).unwrap();
            return;
        }
        assert_eq!(e.code, 3, "the pending CA is not valid yet: {}", e.message);
        let end = world.lock().unwrap().true_now();
        check_pairs(&world.lock().unwrap(), end).unwrap();
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_eq!(run(&world, &config, 4, plain()).await.code, 0);
        let end = world.lock().unwrap().true_now();
        check_pairs(&world.lock().unwrap(), end).unwrap();
    }
}

/// `--rotate-hmac` replaces the HMAC Secret once per run, not at every step and retry.
#[test]
fn rotate_hmac_writes_once_per_run() {
    let spec = RunSpec {
        rotate_hmac: true,
        overwrite: true,
        ..RunSpec::default()
    };
    let out = check(Start::Steady, &[Op::Run(spec)]);
    assert_eq!(out.ended[0].code, 0);
}

/// After a rotation, the prior CA stops being trusted once consumers present the new leaves
/// (was: trusted for up to the CA's lifetime, a leaked key included).
#[test]
fn the_prior_ca_is_dropped_after_the_rotation() {
    runtime().block_on(async {
        let config = config();
        let world = World::new();
        assert_eq!(run(&world, &config, 1, plain()).await.code, 0);
        assert_eq!(run(&world, &config, 2, overwrite()).await.code, 0);
        let w = world.lock().unwrap();
        for name in TLS {
            let bundle = parse_cert_chain(&w.get(name).unwrap().data["ca.crt"]).unwrap();
            assert_eq!(bundle.len(), 1, "{name} still trusts the prior CA");
        }
        assert_eq!(w.cas.len(), 2);
    });
    // Past --timeout, the cleanup is left to the next run, which exits 0.
    let out = check(
        Start::Steady,
        &[Op::Run(RunSpec {
            overwrite: true,
            timeout: Some(DELAY + Duration::from_secs(30)),
            ..RunSpec::default()
        })],
    );
    assert_eq!(out.ended[0].code, 0, "{}", out.ended[0].message);
    assert!(out.ended[0].note.is_some(), "the report says what is left");
}

/// A broken CA Secret replaced with --force takes any stale pending CA with it.
#[test]
fn a_forced_replacement_leaves_no_stale_pending_ca() {
    runtime().block_on(async {
        let config = config();
        let world = World::new();
        assert_eq!(run(&world, &config, 1, plain()).await.code, 0);
        run(&world, &config, 2, crash(overwrite(), 1)).await;
        {
            let mut w = world.lock().unwrap();
            let mut data = w.get(CA).unwrap().data.clone();
            data.insert("tls.key".into(), b"garbage".to_vec());
            w.seed(CA, "kubernetes.io/tls", BTreeMap::new());
            w.objects.get_mut(CA).unwrap().secret.data = data;
        }
        let e = run(&world, &config, 3, plain()).await;
        assert_eq!(e.code, 2, "refused without --force: {}", e.message);
        let e = run(
            &world,
            &config,
            4,
            RunSpec {
                force: true,
                ..RunSpec::default()
            },
        )
        .await;
        assert_eq!(e.code, 0, "{}", e.message);
        assert!(
            !world
                .lock()
                .unwrap()
                .get(CA)
                .unwrap()
                .data
                .contains_key("next.crt")
        );
        assert!(due(&world, &config).await.is_none());
    });
}

/// Every crash point of a staged rotation, then a plain re-run or an `--overwrite` re-run, from
/// certgen's own steady state and from Envoy Gateway's Secrets.
#[test]
fn every_crash_point_then_any_rerun() {
    let mut trajectories = 0;
    let mut pairs = 0;
    for start in [
        Start::Steady,
        Start::EnvoyGateway,
        Start::EnvoyGatewayOverwrite,
    ] {
        for n in 1..=13 {
            for rerun in [
                plain(),
                overwrite(),
                crash(plain(), 1),
                crash(overwrite(), 2),
            ] {
                for gap in [Duration::ZERO, DELAY / 2, DELAY * 2] {
                    let out = check(
                        start,
                        &[
                            Op::Run(crash(overwrite(), n)),
                            Op::Advance(gap),
                            Op::Run(rerun),
                        ],
                    );
                    trajectories += 1;
                    pairs += out.checked.pairs;
                }
            }
        }
    }
    eprintln!("exhaustive crash points: {trajectories} trajectories, {pairs} pairs checked");
}

/// The oracle is not vacuous: the one-write strategy, killed or not, breaks pairwise trust.
#[test]
fn the_oracle_catches_the_one_write_strategy() {
    let err = runtime()
        .block_on(trajectory(
            Start::Steady,
            &[Op::Run(RunSpec {
                overwrite: true,
                immediate: true,
                ..RunSpec::default()
            })],
        ))
        .expect_err("a one-write rotation must fail the oracle");
    assert!(err.contains("is rejected by"), "{err}");
}

fn arb_faults() -> impl Strategy<Value = Faults> {
    (
        prop_oneof![3 => Just(None), 2 => (1usize..14).prop_map(Some)],
        prop_oneof![5 => Just(None), 1 => (1usize..14).prop_map(Some)],
        prop_oneof![5 => Just(None), 1 => (1usize..14).prop_map(Some)],
        any::<u64>(),
    )
        .prop_map(|(crash_after, lose_reply, fail_before, yields)| Faults {
            crash_after,
            lose_reply,
            fail_before,
            yields,
            hang_from: None,
        })
}

fn arb_spec() -> impl Strategy<Value = RunSpec> {
    (
        any::<bool>(),
        prop::bool::weighted(0.2),
        prop_oneof![9 => Just(None), 1 => (60u64..400).prop_map(|s| Some(Duration::from_secs(s)))],
        arb_faults(),
    )
        .prop_map(|(overwrite, rotate_hmac, timeout, faults)| RunSpec {
            overwrite,
            rotate_hmac,
            immediate: false,
            force: false,
            faults,
            timeout,
        })
}

pub(super) fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => arb_spec().prop_map(Op::Run),
        2 => (arb_spec(), arb_spec()).prop_map(|(a, b)| Op::Concurrent(a, b)),
        3 => prop_oneof![
            Just(S * 10),
            Just(DELAY / 2),
            Just(DELAY),
            Just(DELAY * 3),
            Just(Duration::from_secs(200 * 86_400)),
        ]
        .prop_map(Op::Advance),
        1 => prop_oneof![Just(S * 30), Just(Duration::from_secs(3600))].prop_map(Op::ClockBack),
        // Clock steps of an hour either way, of the store or of the writer, between runs or
        // while one runs.
        1 => (any::<bool>(), prop_oneof![Just(3600i64), Just(-3600i64)])
            .prop_map(|(store, secs)| Op::ClockStep { store, secs }),
        1 => (arb_spec(), prop_oneof![Just(S), Just(DELAY / 2)], any::<bool>(), prop_oneof![Just(3600i64), Just(-3600i64)])
            .prop_map(|(spec, after, store, secs)| Op::StepDuring(spec, after, store, secs)),
        // Another writer: between runs, or while a run is between its steps.
        1 => arb_foreign().prop_map(Op::Foreign),
        1 => (arb_spec(), prop_oneof![Just(S), Just(DELAY / 2), Just(DELAY + S * 5)], arb_foreign())
            .prop_map(|(spec, after, f)| Op::During(spec, after, f)),
    ]
}

pub(super) fn arb_start() -> impl Strategy<Value = Start> {
    prop_oneof![
        Just(Start::Fresh),
        Just(Start::Steady),
        Just(Start::EnvoyGateway),
        Just(Start::CaExpiresIn(20)),
        Just(Start::CaExpiresIn(100)),
        Just(Start::CaExpiresIn(-3)),
        Just(Start::EnvoyGatewayOverwrite),
    ]
}

/// Seeded random trajectories: any flags, crash points, lost answers, concurrent runs, time
/// jumps and clock steps, from any starting state. Failures shrink to a minimal sequence.
#[test]
fn random_trajectories_keep_the_invariant() {
    let cases = std::env::var("CERTGEN_SIM_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2400);
    let mut runner = TestRunner::new_with_rng(
        PtConfig {
            cases,
            failure_persistence: None,
            ..PtConfig::default()
        },
        seeded_rng(),
    );
    let totals = std::cell::Cell::new((0usize, 0usize, 0usize));
    let totals_versions = std::cell::Cell::new(0usize);
    runner
        .run(
            &(arb_start(), prop::collection::vec(arb_op(), 1..7)),
            |(start, ops)| {
                let out = runtime()
                    .block_on(trajectory(start, &ops))
                    .map_err(TestCaseError::fail)?;
                let (t, r, p) = totals.get();
                totals.set((t + 1, r + out.runs, p + out.checked.pairs));
                totals_versions.set(totals_versions.get() + out.checked.versions);
                Ok(())
            },
        )
        .unwrap();
    let (t, r, p) = totals.get();
    eprintln!(
        "random trajectories: {t} trajectories, {r} runs, {v} versions written, {p} version pairs checked",
        v = totals_versions.get()
    );
}

/// The random trajectories' generator: fixed (the same trajectories in every run of the suite),
/// or another sequence with `CERTGEN_SIM_SEED=N` to search further.
pub(super) fn seeded_rng() -> proptest::test_runner::TestRng {
    use proptest::test_runner::{RngAlgorithm, TestRng};
    match std::env::var("CERTGEN_SIM_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        Some(n) => {
            let mut seed = [0u8; 32];
            seed[..8].copy_from_slice(&n.to_le_bytes());
            TestRng::from_seed(RngAlgorithm::ChaCha, &seed)
        }
        None => TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    }
}

/// Exit 2 promises that nothing was written: a failure after writes (here the store failing
/// under the run) is exit 5, never 2.
#[test]
fn a_failure_after_writes_is_never_exit_2() {
    runtime().block_on(async {
        let config = config();
        let world = World::new();
        assert_eq!(run(&world, &config, 1, plain()).await.code, 0);
        let e = run(&world, &config, 2, crash(overwrite(), 2)).await;
        assert_eq!(e.code, 5, "{}", e.message);
        assert!(
            e.message.contains("after this run had written"),
            "{}",
            e.message
        );
    });
}

/// Runs that each make one write before they are killed finish a whole rotation, cleanup
/// included (was: a half-done cleanup put the old CA back in every bundle whenever a write had
/// just reset the gate, forever).
#[test]
fn one_write_per_run_finishes_a_rotation_and_its_cleanup() {
    for start in [Start::Steady, Start::EnvoyGateway] {
        let mut ops = vec![Op::Run(crash(overwrite(), 1))];
        for _ in 0..16 {
            ops.push(Op::Advance(S * 5));
            ops.push(Op::Run(crash(plain(), 1)));
        }
        check(start, &ops);
    }
}

/// The reproduction of the foreign-writer hole: Envoy Gateway's own `certgen --overwrite`
/// replaces every leaf and bundle with its CA; the next plain run (the CronJob's) must stage
/// certgen's CA (trust first, leaves after the gate), not sign leaves its bundles lack (was:
/// `update-bundle` and every leaf renewed in one step; 12 of 24 handshakes failed).
#[test]
fn envoy_gateway_overwrite_then_the_cronjob_run() {
    use foreign::{ALL_TLS, Foreign};
    for rerun in [plain(), overwrite(), crash(plain(), 1), crash(plain(), 4)] {
        for gap in [Duration::ZERO, S * 10, DELAY * 2] {
            let out = check(
                Start::Steady,
                &[
                    Op::Foreign(Foreign::EnvoyGateway { which: ALL_TLS }),
                    Op::Advance(gap),
                    Op::Run(rerun),
                ],
            );
            eprintln!(
                "EG --overwrite, gap {gap:?}, {rerun:?}: {} pairs verified, {} failing pairs were Envoy Gateway's own",
                out.checked.pairs - out.checked.foreign_failures,
                out.checked.foreign_failures
            );
        }
    }
}

/// A backup of the Secrets from before a completed rotation comes back (a Velero restore, a
/// GitOps revert): leaves signed by the previous CA, bundles of it alone. certgen's CA Secret
/// holds the new CA, which those bundles do not trust: it is staged again, never used at once.
#[test]
fn a_backup_from_before_a_completed_rotation_is_restored() {
    use foreign::{ALL_TLS, Foreign};
    for which in [ALL_TLS, 0b0001, 0b0110, ALL_TLS | 0b1000, 0b1000] {
        check(
            Start::Steady,
            &[
                Op::Run(overwrite()),
                Op::Advance(DELAY * 3),
                Op::Run(plain()),
                Op::Advance(DELAY * 3),
                Op::Foreign(Foreign::Restore {
                    which,
                    runs_back: 2,
                }),
                Op::Run(plain()),
            ],
        );
    }
}

/// Envoy Gateway's certgen runs while certgen waits at its trust gate: the gate counts from
/// that write, and the leaves are signed only once every held bundle trusts their CA.
#[test]
fn a_foreign_write_during_a_trust_gate() {
    use foreign::{ALL_TLS, Foreign};
    for after in [S, DELAY / 2, DELAY - S, DELAY + S * 5] {
        for which in [ALL_TLS, 0b0001, 0b0011] {
            check(
                Start::Steady,
                &[Op::During(
                    overwrite(),
                    after,
                    Foreign::EnvoyGateway { which },
                )],
            );
        }
    }
}

/// Mixed states: some Secrets another tool's, some certgen's; leaves from two foreign CAs; a
/// CA Secret deleted or restored alone; a hand-edited `ca.crt`; another tool's CA Secret.
#[test]
fn mixed_states_left_by_other_writers() {
    use foreign::{ALL_TLS, Foreign};
    let cases: Vec<Vec<Op>> = vec![
        vec![Op::Foreign(Foreign::EnvoyGateway { which: 0b0001 })],
        vec![
            Op::Foreign(Foreign::EnvoyGateway { which: 0b0001 }),
            Op::Foreign(Foreign::FreshCa { which: 0b0010 }),
        ],
        vec![Op::Foreign(Foreign::Delete { which: 0b1000 })],
        vec![Op::Foreign(Foreign::FreshCa {
            which: ALL_TLS | 0b1000,
        })],
        vec![Op::Foreign(Foreign::FreshCa { which: 0b1000 })],
        vec![
            Op::Run(overwrite()),
            Op::Advance(DELAY * 3),
            Op::Run(plain()),
            Op::Foreign(Foreign::Restore {
                which: 0b1000,
                runs_back: 2,
            }),
        ],
        vec![Op::Foreign(Foreign::HandEdit {
            secret: 0,
            append: true,
        })],
        vec![
            Op::Run(crash(overwrite(), 3)),
            Op::Foreign(Foreign::HandEdit {
                secret: 1,
                append: false,
            }),
        ],
        vec![Op::Foreign(Foreign::Delete { which: 0b0101 })],
    ];
    for ops in cases {
        for rerun in [plain(), overwrite()] {
            let mut ops = ops.clone();
            ops.push(Op::Run(rerun));
            check(Start::Steady, &ops);
        }
    }
}

fn arb_foreign() -> impl Strategy<Value = foreign::Foreign> {
    use foreign::Foreign;
    prop_oneof![
        3 => (1u8..8).prop_map(|which| Foreign::EnvoyGateway { which }),
        1 => (0usize..3, any::<bool>()).prop_map(|(secret, append)| Foreign::HandEdit { secret, append }),
        1 => (1u8..16, 1usize..4).prop_map(|(which, runs_back)| Foreign::Restore { which, runs_back }),
        1 => (1u8..16).prop_map(|which| Foreign::FreshCa { which }),
        1 => (1u8..16).prop_map(|which| Foreign::Delete { which }),
        2 => (1u8..16, any::<usize>()).prop_map(|(which, at)| Foreign::RestoreAt { which, at }),
        1 => (0usize..5).prop_map(|kind| Foreign::PlantCa { kind }),
    ]
}

/// Every crash point of the CronJob's plain run after Envoy Gateway's `--overwrite`, then any
/// re-run after any gap: the derived state survives a crash anywhere (the CA Secret records it
/// with the trust step).
#[test]
fn every_crash_point_after_a_foreign_overwrite() {
    let mut trajectories = 0;
    let mut pairs = 0;
    let mut foreign = 0;
    for n in 1..=13 {
        for rerun in [plain(), overwrite(), crash(plain(), 1)] {
            for gap in [Duration::ZERO, DELAY / 2, DELAY * 2] {
                let out = check(
                    Start::EnvoyGatewayOverwrite,
                    &[Op::Run(crash(plain(), n)), Op::Advance(gap), Op::Run(rerun)],
                );
                trajectories += 1;
                pairs += out.checked.pairs;
                foreign += out.checked.foreign_failures;
            }
        }
    }
    eprintln!(
        "crash points after a foreign overwrite: {trajectories} trajectories, {pairs} pairs checked, {foreign} failing pairs charged to Envoy Gateway's replacement, 0 to certgen"
    );
}

/// States the random generator found once another writer's restores, deletions, fresh CAs
/// and writes during a run were in it.
#[test]
fn foreign_writes_found_at_random() {
    use foreign::Foreign;
    let cases: Vec<(Start, Vec<Op>)> = vec![
        // An expired CA replaced (the crash left one leaf of the new CA), Envoy Gateway writes
        // that Secret a second later, then an --overwrite run while it writes another.
        (
            Start::CaExpiresIn(-3),
            vec![
                Op::During(
                    crash(plain(), 2),
                    S,
                    Foreign::EnvoyGateway { which: 0b0100 },
                ),
                Op::During(overwrite(), S, Foreign::EnvoyGateway { which: 0b0001 }),
            ],
        ),
        (
            Start::Fresh,
            vec![
                Op::Run(plain()),
                Op::Run(RunSpec {
                    rotate_hmac: true,
                    ..crash(overwrite(), 10)
                }),
                Op::During(
                    plain(),
                    S,
                    Foreign::Restore {
                        which: 0b1101,
                        runs_back: 2,
                    },
                ),
                Op::Foreign(Foreign::Delete { which: 0b0010 }),
                Op::Run(plain()),
            ],
        ),
        (
            Start::Fresh,
            vec![
                Op::Foreign(Foreign::EnvoyGateway { which: 0b0001 }),
                Op::During(plain(), S, Foreign::FreshCa { which: 0b0010 }),
                Op::Run(plain()),
            ],
        ),
        (
            Start::Fresh,
            vec![
                Op::Run(plain()),
                Op::Run(RunSpec {
                    rotate_hmac: true,
                    ..crash(overwrite(), 10)
                }),
                Op::During(
                    RunSpec {
                        faults: Faults {
                            yields: 1024769269166599827,
                            ..crash(overwrite(), 5).faults
                        },
                        ..crash(overwrite(), 5)
                    },
                    S,
                    Foreign::Restore {
                        which: 0b1101,
                        runs_back: 2,
                    },
                ),
                Op::Foreign(Foreign::Delete { which: 0b0010 }),
                Op::Run(plain()),
            ],
        ),
        (
            Start::CaExpiresIn(-3),
            vec![
                Op::Foreign(Foreign::EnvoyGateway { which: 0b0011 }),
                Op::Run(crash(plain(), 4)),
                Op::Run(overwrite()),
                Op::Run(plain()),
                Op::During(
                    crash(overwrite(), 1),
                    S,
                    Foreign::Restore {
                        which: 0b0101,
                        runs_back: 3,
                    },
                ),
            ],
        ),
    ];
    for (start, ops) in cases {
        check(start, &ops);
    }
}

/// Class 1 of issue 31, exhaustively: after a completed staged rotation, any subset of the
/// Secrets (the CA Secret alone included) restored to its state at any point of that rotation
/// (a backup taken at its trust gate, between two of its steps), then the CronJob's plain run;
/// and the same restore while a plain run is between its steps. Before the fix, the CA Secret
/// restored alone to the trust gate made the next run write the old CA's leaves with no gate.
#[test]
fn a_restore_to_any_point_of_a_rotation() {
    use foreign::Foreign;
    let (mut trajectories, mut pairs, mut foreign) = (0, 0, 0);
    // The writes of one staged --overwrite from certgen's steady state (and the install's).
    let writes = runtime().block_on(async {
        let world = World::new();
        let config = config();
        assert_eq!(run(&world, &config, 1, plain()).await.code, 0);
        assert_eq!(run(&world, &config, 2, overwrite()).await.code, 0);
        world.lock().unwrap().history.len()
    });
    for at in 0..=writes {
        for which in [0b1000u8, 0b1111, 0b0111, 0b1001, 0b0110] {
            for during in [false, true] {
                let restore = Foreign::RestoreAt { which, at };
                let ops = if during {
                    vec![Op::Run(overwrite()), Op::During(plain(), S, restore)]
                } else {
                    vec![
                        Op::Run(overwrite()),
                        Op::Advance(DELAY * 2),
                        Op::Foreign(restore),
                        Op::Run(plain()),
                    ]
                };
                let out = check(Start::Steady, &ops);
                trajectories += 1;
                pairs += out.checked.pairs;
                foreign += out.checked.foreign_failures;
            }
        }
    }
    eprintln!(
        "restores to any point of a rotation: {trajectories} trajectories, {pairs} pairs checked, {foreign} failing pairs charged to the restore, 0 to certgen"
    );
}

/// Class 3 of issue 31: a CA no TLS verifier accepts for the profile's leaves (each
/// constraint) planted in the CA Secret with its key is refused with the reason (exit 2,
/// nothing written), never adopted; `--force` replaces it staged, and every pair verifies.
#[test]
fn a_planted_ca_no_verifier_accepts_is_refused() {
    use foreign::{CONSTRAINTS, Foreign};
    for (kind, constraint) in CONSTRAINTS.iter().enumerate() {
        runtime().block_on(async {
            let config = config();
            let world = World::new();
            assert_eq!(run(&world, &config, 1, plain()).await.code, 0);
            tokio::time::advance(DELAY * 2).await;
            Foreign::PlantCa { kind }.write(&world, &config);
            let writes = world.lock().unwrap().log.len();
            let e = run(&world, &config, 2, plain()).await;
            assert_eq!(e.code, 2, "{constraint}: {}", e.message);
            assert!(
                e.message.contains("would be rejected by TLS verifiers"),
                "{}",
                e.message
            );
            assert_eq!(world.lock().unwrap().log.len(), writes, "nothing written");
            let forced = RunSpec {
                force: true,
                ..plain()
            };
            assert_eq!(run(&world, &config, 3, forced).await.code, 0);
            for i in 4..8 {
                tokio::time::advance(DELAY + S).await;
                assert_eq!(run(&world, &config, i, plain()).await.code, 0);
            }
            let w = world.lock().unwrap();
            let end = w.true_now();
            check_pairs(&w, end).unwrap();
            check_current(&w, end).unwrap();
        });
    }
}

/// Found by `random_trajectories_keep_the_invariant` (seeded, 2,000 cases): the store's clock
/// steps an hour ahead during a fresh install, and another tool replaces the CA Secret alone
/// during the next run.
#[test]
fn a_store_clock_step_then_a_foreign_ca_during_a_run() {
    use foreign::Foreign;
    check(
        Start::Fresh,
        &[
            Op::StepDuring(plain(), S, true, 3600),
            Op::During(plain(), S, Foreign::FreshCa { which: 0b1000 }),
        ],
    );
}

/// Found by `random_trajectories_keep_the_invariant` (seeded, 2,000 cases): a backup of the CA
/// Secret and one TLS Secret taken mid-rotation restored during a run, the store's clock an hour
/// back, then a plain run and an `--overwrite` at once.
#[test]
fn a_mid_rotation_restore_then_two_runs_at_once() {
    use foreign::Foreign;
    check(
        Start::Steady,
        &[
            Op::Run(RunSpec {
                faults: Faults {
                    yields: 1788743390216342264,
                    ..Faults::default()
                },
                ..overwrite()
            }),
            Op::During(
                plain(),
                S,
                Foreign::RestoreAt {
                    which: 9,
                    at: 4938728860764781714,
                },
            ),
            Op::ClockBack(Duration::from_secs(3600)),
            Op::Concurrent(plain(), overwrite()),
        ],
    );
}

/// One rotation per due (issue 46, B1): a rotation stopped after its promotion (the new CA
/// active, leaves still of the old one, which has since expired) is finished by an
/// `--overwrite` run, which begins no other (was: the expired CA let it start a second
/// rotation at once). Found by the oracle's widened rule in the random trajectories.
#[test]
fn a_rotation_stopped_after_its_promotion_is_finished_not_begun_again() {
    let out = check(
        Start::CaExpiresIn(20),
        &[
            Op::Run(crash(plain(), 5)),
            Op::Advance(Duration::from_secs(200 * 86_400)),
            Op::Run(overwrite()),
        ],
    );
    assert_eq!(out.ended[1].code, 0, "{}", out.ended[1].message);
}
