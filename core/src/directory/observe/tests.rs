//! Observation's rules: who may observe an agent (`may_observe`, scoped by shared goals, with
//! no existence leak), how much of a run an excerpt may show (`excerpt_detail`, over every
//! audience, placer, owner and reader: kinds and times only for the placer), and how an excerpt is cut (`cut_excerpt`: the last log lines or the
//! first output lines, each cut on a char boundary, every cut declared, always advisory),
//! on fixed cases and over random lines, bounds, goals and audiences.

use proptest::prelude::*;

use super::*;

fn run(parent: Option<&str>) -> RunFacts {
    run_of("cfo", parent)
}

fn run_of(agent: &str, parent: Option<&str>) -> RunFacts {
    RunFacts {
        run: RunId::parse("run_0123456789abcdef0123456789abcdef").unwrap(),
        agent: agent.into(),
        status: RunStatus::Running,
        parent_agent: parent.map(str::to_owned),
        hop_depth: 1,
        created_at_ms: 1,
        settled_at_ms: None,
        seq: 3,
    }
}

fn agent(name: &str) -> Audience {
    Audience::Agent(name.into())
}

#[test]
fn members_of_a_shared_goal_and_operators_may_observe_others_may_not() {
    let members = ["cmo".to_owned(), "cfo".to_owned()];
    let goals = [Goal {
        name: "g",
        agents: &members,
    }];
    assert!(may_observe(&goals, &agent("cmo"), "cfo").is_ok());
    assert!(may_observe(&goals, &agent("hr"), "hr").is_ok());
    assert_eq!(
        may_observe(&goals, &agent("hr"), "cfo"),
        Err(ScopeGap::AudienceNotAuthorized)
    );
    assert_eq!(
        may_observe(&goals, &agent("hr"), "ghost"),
        Err(ScopeGap::AudienceNotAuthorized),
        "no existence leak"
    );
    assert!(may_observe(&goals, &Audience::Operator, "ghost").is_ok());
    assert_eq!(
        may_observe(&goals, &Audience::Unidentified, "cfo"),
        Err(ScopeGap::Unknown)
    );
    assert_eq!(
        may_observe(&goals, &Audience::Principal("api:eve".into()), "cfo"),
        Err(ScopeGap::AudienceNotAuthorized)
    );
}

#[test]
fn the_placer_reads_kinds_only_the_owner_an_operator_and_named_readers_read_it_all() {
    use ExcerptDetail::{Full, KindsOnly};
    let none: &[String] = &[];
    assert_eq!(
        excerpt_detail(&agent("cmo"), &run(Some("cmo")), none),
        Some(KindsOnly)
    );
    assert_eq!(
        excerpt_detail(&agent("cfo"), &run(Some("cmo")), none),
        Some(Full)
    );
    assert_eq!(excerpt_detail(&agent("hr"), &run(Some("cmo")), none), None);
    assert_eq!(excerpt_detail(&agent("cmo"), &run(None), none), None);
    assert_eq!(
        excerpt_detail(&Audience::Operator, &run(None), none),
        Some(Full)
    );
    assert_eq!(
        excerpt_detail(&Audience::Unidentified, &run(Some("cmo")), none),
        None
    );
    // The run's agent names a reader: it reads every run in full, placed or not.
    let auditor = ["auditor".to_owned()];
    assert_eq!(
        excerpt_detail(&agent("auditor"), &run(None), &auditor),
        Some(Full)
    );
    assert_eq!(
        excerpt_detail(&agent("cmo"), &run(Some("cmo")), &auditor),
        Some(KindsOnly)
    );
    // A principal that bears a reader's name is still not that agent.
    let principal = Audience::Principal("auditor".into());
    assert_eq!(excerpt_detail(&principal, &run(None), &auditor), None);
}

#[test]
fn excerpt_detail_holds_its_truth_table_over_every_audience_placer_owner_and_reader() {
    // (audience, placer, owner, readers) -> detail. A principal that bears an agent's name is
    // still not that agent.
    let audiences = [
        agent("cmo"),
        agent("cfo"),
        agent("hr"),
        Audience::Operator,
        Audience::Principal("cmo".into()),
        Audience::Principal("cfo".into()),
        Audience::Unidentified,
    ];
    let reader_lists: [Vec<String>; 3] =
        [vec![], vec!["hr".into()], vec!["cmo".into(), "hr".into()]];
    let mut checked = 0;
    for audience in &audiences {
        for parent in [None, Some("cmo"), Some("cfo"), Some("hr")] {
            for owner in ["cmo", "cfo"] {
                for readers in &reader_lists {
                    let expected = match audience {
                        Audience::Operator => Some(ExcerptDetail::Full),
                        Audience::Agent(me) if owner == me || readers.contains(me) => {
                            Some(ExcerptDetail::Full)
                        }
                        Audience::Agent(me) if parent == Some(me.as_str()) => {
                            Some(ExcerptDetail::KindsOnly)
                        }
                        _ => None,
                    };
                    assert_eq!(
                        excerpt_detail(audience, &run_of(owner, parent), readers),
                        expected,
                        "{audience:?} on a run of {owner} placed by {parent:?}, readers {readers:?}"
                    );
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 7 * 4 * 2 * 3);
}

#[test]
fn a_kinds_only_excerpt_shows_kinds_and_times_and_says_what_it_left_out() {
    let full = ExcerptDetail::Full.event_line(4, "tool_result", "t", "{\"content\":\"secret\"}");
    assert_eq!(full, "#4 tool_result: {\"content\":\"secret\"}");
    let kinds =
        ExcerptDetail::KindsOnly.event_line(4, "tool_result", "2026-12-05T12:00:00Z", "secret");
    assert_eq!(kinds, "#4 tool_result at 2026-12-05T12:00:00Z");
    assert!(!kinds.contains("secret"));
    match ExcerptDetail::KindsOnly.limit(ExcerptSource::Events) {
        Some(ObservationLimit::ContentWithheld { left_out }) => {
            assert_eq!(
                left_out,
                ["tool_inputs", "tool_results", "model_turns", "env_values"]
            );
        }
        other => panic!("expected content_withheld, got {other:?}"),
    }
    // The output is the answer: nothing is withheld from it, and a full excerpt withholds none.
    assert_eq!(ExcerptDetail::KindsOnly.limit(ExcerptSource::Output), None);
    assert_eq!(ExcerptDetail::Full.limit(ExcerptSource::Events), None);
}

#[test]
fn an_event_excerpt_keeps_the_last_lines_and_declares_every_cut() {
    let lines: Vec<String> = (0..10).map(|i| format!("line {i}")).collect();
    let (excerpt, limits) = cut_excerpt(ExcerptSource::Events, &lines, ExcerptBound::lines(3));
    assert_eq!(excerpt.lines, vec!["line 7", "line 8", "line 9"]);
    assert_eq!(excerpt.label, "advisory");
    assert!(limits.contains(&ObservationLimit::ExcerptIsAdvisory));
    assert!(limits.contains(&ObservationLimit::LogTruncated {
        shown: 3,
        total: 10
    }));
    let (excerpt, _) = cut_excerpt(ExcerptSource::Output, &lines, ExcerptBound::lines(2));
    assert_eq!(excerpt.lines, vec!["line 0", "line 1"]);
}

#[test]
fn long_lines_are_cut_on_a_char_boundary_and_counted() {
    let lines = vec!["é".repeat(MAX_LINE_BYTES), "short".into()];
    let (excerpt, limits) = cut_excerpt(ExcerptSource::Events, &lines, ExcerptBound::lines(5));
    assert!(excerpt.lines[0].len() <= MAX_LINE_BYTES + '…'.len_utf8());
    assert_eq!(excerpt.lines[1], "short");
    assert!(limits.contains(&ObservationLimit::LinesCut { lines: 1 }));
    assert!(
        !limits
            .iter()
            .any(|l| matches!(l, ObservationLimit::LogTruncated { .. }))
    );
}

#[test]
fn a_line_of_exactly_the_byte_bound_is_not_cut_and_one_byte_more_is() {
    let exact = "a".repeat(MAX_LINE_BYTES);
    let over = format!("{exact}b");
    // A four-byte char straddling the bound is dropped whole.
    let straddling = format!("{}😀", "a".repeat(MAX_LINE_BYTES - 2));
    let lines = vec![exact.clone(), over, straddling];
    let (excerpt, limits) = cut_excerpt(ExcerptSource::Output, &lines, ExcerptBound::lines(3));
    assert_eq!(excerpt.lines[0], exact);
    assert_eq!(excerpt.lines[1], format!("{exact}…"));
    assert_eq!(
        excerpt.lines[2],
        format!("{}…", "a".repeat(MAX_LINE_BYTES - 2))
    );
    assert_eq!(
        limits,
        [
            ObservationLimit::ExcerptIsAdvisory,
            ObservationLimit::LinesCut { lines: 2 }
        ]
    );
}

#[test]
fn no_lines_give_an_empty_advisory_excerpt() {
    for source in [ExcerptSource::Events, ExcerptSource::Output] {
        let (excerpt, limits) = cut_excerpt(source, &[], ExcerptBound::lines(10));
        assert!(excerpt.lines.is_empty());
        assert_eq!(excerpt.label, "advisory");
        assert_eq!(limits, [ObservationLimit::ExcerptIsAdvisory]);
    }
}

#[test]
fn bounds_are_clamped() {
    assert_eq!(ExcerptBound::lines(0).max_lines, 1);
    assert_eq!(ExcerptBound::lines(10_000).max_lines, MAX_EXCERPT_LINES);
}

/// A line of up to 1000 bytes: any chars but newlines, or a mix of one- to four-byte chars
/// long enough to straddle the byte bound.
fn line() -> impl Strategy<Value = String> {
    let mixed = proptest::collection::vec(
        proptest::sample::select(vec!['a', 'é', '€', '😀', ' ']),
        0..=400,
    )
    .prop_map(|chars| chars.into_iter().collect::<String>());
    prop_oneof![".{0,250}", mixed].prop_map(|mut line| {
        let mut end = line.len().min(1000);
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line
    })
}

fn source() -> impl Strategy<Value = ExcerptSource> {
    prop_oneof![Just(ExcerptSource::Events), Just(ExcerptSource::Output)]
}

/// The agent names the random goals draw from.
const AGENTS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];

/// 0..5 goals of 0..5 agents each, from [`AGENTS`].
fn goal_members() -> impl Strategy<Value = Vec<Vec<String>>> {
    proptest::collection::vec(
        proptest::collection::vec(
            proptest::sample::select(AGENTS.to_vec()).prop_map(str::to_owned),
            0..5,
        ),
        0..5,
    )
}

fn goals_of(members: &[Vec<String>]) -> Vec<Goal<'_>> {
    members
        .iter()
        .map(|agents| Goal { name: "g", agents })
        .collect()
}

/// An agent of [`AGENTS`], or one of no goal.
fn target() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => proptest::sample::select(AGENTS.to_vec()).prop_map(str::to_owned),
        1 => Just("ghost".to_owned()),
    ]
}

fn audience() -> impl Strategy<Value = Audience> {
    prop_oneof![
        6 => target().prop_map(Audience::Agent),
        1 => Just(Audience::Operator),
        1 => target().prop_map(Audience::Principal),
        1 => Just(Audience::Unidentified),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever the lines and the bound: at most `max_lines` lines, each within the byte
    /// bound plus the cut marker; the event log keeps its last lines and the output its
    /// first, each line whole or a char-boundary prefix of it followed by the marker; a log
    /// cut is declared with the right numbers exactly when lines were left out, a line cut
    /// with the exact count exactly when there was one; always advisory, never a panic.
    #[test]
    fn an_excerpt_keeps_its_bounds_and_declares_exactly_its_cuts(
        lines in proptest::collection::vec(line(), 0..60),
        max_lines in 0..150usize,
        source in source(),
    ) {
        let bound = ExcerptBound::lines(max_lines);
        let (excerpt, limits) = cut_excerpt(source, &lines, bound);
        let total = lines.len();
        let shown = excerpt.lines.len();

        prop_assert_eq!(excerpt.source, source);
        prop_assert_eq!(excerpt.bound, bound);
        prop_assert_eq!(excerpt.label.as_str(), "advisory");
        prop_assert!(shown <= bound.max_lines);
        prop_assert_eq!(shown, total.min(bound.max_lines));

        // Which lines: a suffix of the log, a prefix of the output.
        let kept: &[String] = match source {
            ExcerptSource::Events => &lines[total - shown..],
            ExcerptSource::Output => &lines[..shown],
        };
        let mut cut = 0;
        for (out, input) in excerpt.lines.iter().zip(kept) {
            prop_assert!(out.len() <= bound.max_line_bytes + '…'.len_utf8(), "{} bytes", out.len());
            if input.len() <= bound.max_line_bytes {
                prop_assert_eq!(out, input);
            } else {
                cut += 1;
                let head = out.strip_suffix('…').unwrap();
                prop_assert!(input.starts_with(head));
                prop_assert!(head.len() <= bound.max_line_bytes);
                // As much as fits: the next char of the input would not.
                let next = input[head.len()..].chars().next().unwrap();
                prop_assert!(head.len() + next.len_utf8() > bound.max_line_bytes);
            }
        }

        // The limits, each declared once and only when due.
        let mut expected = vec![ObservationLimit::ExcerptIsAdvisory];
        if shown < total {
            expected.push(ObservationLimit::LogTruncated { shown, total });
        }
        if cut > 0 {
            expected.push(ObservationLimit::LinesCut { lines: cut });
        }
        prop_assert_eq!(limits, expected);
    }

    /// An agent may observe itself and the members of a goal it shares with them, nothing
    /// else, whether or not the target exists; an operator anything; an unidentified caller
    /// nothing (`unknown`) and a principal nothing (`audience_not_authorized`).
    #[test]
    fn observation_is_scoped_by_shared_goals(
        members in goal_members(),
        audience in audience(),
        target in target(),
    ) {
        let goals = goals_of(&members);
        let answer = may_observe(&goals, &audience, &target);
        match &audience {
            Audience::Operator => prop_assert_eq!(answer, Ok(())),
            Audience::Unidentified => prop_assert_eq!(answer, Err(ScopeGap::Unknown)),
            Audience::Principal(_) => {
                prop_assert_eq!(answer, Err(ScopeGap::AudienceNotAuthorized));
            }
            Audience::Agent(me) => {
                let shared = members
                    .iter()
                    .any(|g| g.contains(me) && g.contains(&target));
                if me == &target || shared {
                    prop_assert_eq!(answer, Ok(()));
                } else {
                    prop_assert_eq!(answer, Err(ScopeGap::AudienceNotAuthorized));
                }
            }
        }
    }

    /// An agent's answer depends only on the goals it is in: taking every other goal away
    /// changes nothing, so no answer tells it about a goal it is not in.
    #[test]
    fn an_agent_s_answer_ignores_goals_it_is_not_in(
        members in goal_members(),
        me in target(),
        target in target(),
    ) {
        let all = goals_of(&members);
        let mine: Vec<Goal<'_>> = all.iter().copied().filter(|g| g.has(&me)).collect();
        let audience = Audience::Agent(me);
        prop_assert_eq!(
            may_observe(&all, &audience, &target),
            may_observe(&mine, &audience, &target)
        );
    }
}
