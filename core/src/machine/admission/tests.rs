//! Admission's counts and reservations: every way a reservation ends, and the limits it
//! enforces while runs are still at the store.

use super::*;

fn limits(admission_limit: usize, per_principal_limit: usize) -> AdmissionLimits {
    AdmissionLimits {
        admission_limit,
        per_principal_limit,
    }
}

fn gate(reservation: &CallReservation, active: usize, cap: u32) -> InboundGate {
    InboundGate::new(
        ("a", "b"),
        &["a".to_owned()],
        1,
        (reservation, active),
        (
            8,
            Limits {
                max_calls_per_run: cap,
                ..Limits::default()
            },
        ),
    )
}

fn no_count() -> Result<u64, String> {
    Err("the kept count was known: the store must not be asked".into())
}

#[test]
fn a_root_run_is_refused_at_the_admission_limit_and_counts_until_it_settles() {
    let mut adm = Admission::new(limits(2, 10));
    let (r1, r2, r3) = (RunId::random(), RunId::random(), RunId::random());
    assert_eq!(adm.admit_root("b", &r1, "hi", "p"), Ok(()));
    assert_eq!(adm.admit_root("b", &r2, "hi", "q"), Ok(()));
    let refused = adm.admit_root("b", &r3, "hi", "r").unwrap_err();
    assert_eq!(refused.code(), "saturated");
    assert_eq!(adm.unsettled(), 2, "a refused run reserves nothing");
    adm.settled(&r1);
    assert_eq!(adm.admit_root("b", &r3, "hi", "r"), Ok(()));
}

#[test]
fn an_empty_input_is_refused_before_anything_is_counted() {
    let mut adm = Admission::new(limits(2, 10));
    let refused = adm
        .admit_root("b", &RunId::random(), "  ", "p")
        .unwrap_err();
    assert_eq!(refused, Refusal::EmptyInput);
    assert_eq!(adm.unsettled(), 0);
}

#[test]
fn one_principal_cannot_take_more_than_its_share() {
    let mut adm = Admission::new(limits(10, 2));
    let runs: Vec<RunId> = (0..3).map(|_| RunId::random()).collect();
    assert!(adm.admit_root("b", &runs[0], "x", "p").is_ok());
    assert!(adm.admit_root("b", &runs[1], "x", "p").is_ok());
    let refused = adm.admit_root("b", &runs[2], "x", "p").unwrap_err();
    assert_eq!(refused.code(), "principal_saturated");
    assert!(
        adm.admit_root("b", &runs[2], "x", "other").is_ok(),
        "another principal still has room"
    );
    adm.settled(&runs[0]);
    assert!(adm.admit_root("b", &RunId::random(), "x", "p").is_ok());
}

#[test]
fn restored_runs_count_toward_the_limit_and_the_share() {
    let mut adm = Admission::new(limits(3, 1));
    let (root, child) = (RunId::random(), RunId::random());
    adm.restore(root.clone(), Some("p".into()));
    adm.restore(child, None);
    assert_eq!(adm.unsettled(), 2);
    assert_eq!(
        adm.admit_root("b", &RunId::random(), "x", "p")
            .unwrap_err()
            .code(),
        "principal_saturated"
    );
    adm.settled(&root);
    assert!(adm.admit_root("b", &RunId::random(), "x", "p").is_ok());
}

#[test]
fn the_first_call_of_a_parent_is_counted_in_the_store_and_later_ones_from_the_kept_count() {
    let mut adm = Admission::new(limits(8, 8));
    let parent = RunId::random();
    let (first, active) = adm.reserve_call(&parent);
    assert_eq!(first.known_children, None);
    assert_eq!(active, 0);
    // The store counted 2 children before this one, and stored it.
    assert_eq!(
        gate(&first, active, 5).admit(false, || Ok::<_, String>(2)),
        Ok(CallAdmission::Insert { children_before: 2 })
    );
    adm.call_admitted(&first, &CallAdmitted::Stored { children_before: 2 });
    let (second, active) = adm.reserve_call(&parent);
    assert_eq!(second.known_children, Some(3));
    assert_eq!(active, 1);
    assert_eq!(
        gate(&second, active, 5).admit(false, no_count),
        Ok(CallAdmission::Insert { children_before: 3 })
    );
    adm.call_admitted(&second, &CallAdmitted::Stored { children_before: 3 });
    let (third, _) = adm.reserve_call(&parent);
    assert_eq!(third.known_children, Some(4));
}

#[test]
fn while_a_store_count_is_out_a_parents_later_calls_are_counted_in_the_store_too() {
    let mut adm = Admission::new(limits(8, 8));
    let parent = RunId::random();
    adm.reserve_call(&parent);
    let (known, _) = {
        // A count is kept from an earlier start, but a job counting in the store is out.
        adm.count_children(&parent, 7);
        adm.reserve_call(&parent)
    };
    assert_eq!(
        known.known_children, None,
        "a kept count that misses a run in flight is never used"
    );
    assert!(!adm.is_quiet());
}

#[test]
fn a_call_that_was_not_stored_gives_its_reservation_back() {
    for found in [
        CallAdmitted::Replay,
        CallAdmitted::Failed,
        CallAdmitted::Refused { children: 1 },
    ] {
        let mut adm = Admission::new(limits(8, 8));
        let parent = RunId::random();
        adm.count_children(&parent, 1);
        let (reservation, _) = adm.reserve_call(&parent);
        assert_eq!(reservation.known_children, Some(1));
        assert_eq!(adm.unsettled(), 1);
        adm.call_admitted(&reservation, &found);
        assert_eq!(adm.unsettled(), 0, "{found:?}");
        let (again, _) = adm.reserve_call(&parent);
        assert_eq!(
            again.known_children,
            Some(1),
            "{found:?}: the child goes back"
        );
    }
}

#[test]
fn a_refusal_counted_in_the_store_keeps_the_count_it_found() {
    let mut adm = Admission::new(limits(8, 8));
    let parent = RunId::random();
    let (reservation, active) = adm.reserve_call(&parent);
    let admitted = gate(&reservation, active, 2).admit(false, || Ok::<_, String>(2));
    let Ok(CallAdmission::Refused { children, refusal }) = admitted else {
        panic!("the cap refuses: {admitted:?}");
    };
    assert_eq!(refusal.code(), "call_cap");
    adm.call_admitted(&reservation, &CallAdmitted::Refused { children });
    assert!(adm.is_quiet());
    assert_eq!(adm.unsettled(), 0);
    let (next, _) = adm.reserve_call(&parent);
    assert_eq!(next.known_children, Some(2));
}

#[test]
fn a_replay_is_found_before_any_guard_and_never_counted() {
    let adm_gate = gate(
        &CallReservation {
            parent: RunId::random(),
            known_children: Some(99),
        },
        100,
        1,
    );
    assert_eq!(adm_gate.admit(true, no_count), Ok(CallAdmission::Replay));
}

#[test]
fn the_admission_limit_counts_reserved_calls() {
    let mut adm = Admission::new(limits(1, 8));
    let (first, active) = adm.reserve_call(&RunId::random());
    assert_eq!(
        gate(&first, active, 5).admit(false, || Ok::<_, String>(0)),
        Ok(CallAdmission::Insert { children_before: 0 })
    );
    let (second, active) = adm.reserve_call(&RunId::random());
    assert_eq!(
        active, 1,
        "the first call is counted before its insert commits"
    );
    let limited = InboundGate::new(
        ("a", "b"),
        &["a".to_owned()],
        1,
        (&second, active),
        (1, Limits::default()),
    );
    let Ok(CallAdmission::Refused { refusal, .. }) = limited.admit(false, || Ok::<_, String>(0))
    else {
        panic!("saturated");
    };
    assert_eq!(refusal.code(), "saturated");
}

#[test]
fn a_store_count_that_fails_fails_the_admission() {
    let reservation = CallReservation {
        parent: RunId::random(),
        known_children: None,
    };
    assert_eq!(
        gate(&reservation, 0, 5).admit(false, || Err("disk".to_owned())),
        Err("disk".to_owned())
    );
}

#[test]
fn the_kept_children_counts_are_bounded() {
    let mut adm = Admission::new(limits(8, 8));
    for _ in 0..CHILDREN_KEPT {
        adm.count_children(&RunId::random(), 1);
    }
    let parent = RunId::random();
    adm.count_children(&parent, 3);
    assert_eq!(
        adm.children.len(),
        1,
        "the counts were dropped, the new one kept"
    );
    let (reservation, _) = adm.reserve_call(&parent);
    assert_eq!(reservation.known_children, Some(3));
}
