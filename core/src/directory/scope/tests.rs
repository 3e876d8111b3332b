//! `resolve_goal` for every audience, with a goal named or not, against a caller that is a
//! member, is not, names a goal that does not exist, belongs to several goals or to none; and
//! the stable codes and texts of [`ScopeGap`].

use proptest::prelude::*;

use super::*;

/// `launch` has cmo and cfo, `audit` has cfo and auditor, `ops` has only ops: cmo is in one
/// goal, cfo in two, intern in none.
struct Fleet {
    launch: Vec<String>,
    audit: Vec<String>,
    ops: Vec<String>,
}

impl Fleet {
    fn new() -> Self {
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect();
        Self {
            launch: names(&["cmo", "cfo"]),
            audit: names(&["cfo", "auditor"]),
            ops: names(&["ops"]),
        }
    }

    fn goals(&self) -> Vec<Goal<'_>> {
        vec![
            Goal {
                name: "launch",
                agents: &self.launch,
            },
            Goal {
                name: "audit",
                agents: &self.audit,
            },
            Goal {
                name: "ops",
                agents: &self.ops,
            },
        ]
    }
}

fn agent(name: &str) -> Audience {
    Audience::Agent(name.to_owned())
}

/// What a caller may name: a goal of the fleet, one it does not declare, or nothing.
const ASKED: [Option<&str>; 5] = [
    None,
    Some("launch"),
    Some("audit"),
    Some("ops"),
    Some("no_such_goal"),
];

#[test]
fn membership_is_by_exact_agent_name() {
    let fleet = Fleet::new();
    let launch = fleet.goals()[0];
    assert!(launch.has("cmo"));
    assert!(launch.has("cfo"));
    assert!(!launch.has("auditor"));
    assert!(!launch.has("cm"));
    assert!(!launch.has("CMO"));
    assert!(!launch.has(""));
}

#[test]
fn an_unidentified_caller_gets_unknown_whatever_it_names() {
    let fleet = Fleet::new();
    let all = fleet.goals();
    for goals in [&all[..], &all[..1], &[][..]] {
        for asked in ASKED {
            assert_eq!(
                resolve_goal(goals, &Audience::Unidentified, asked),
                Err(ScopeGap::Unknown),
                "asked {asked:?} among {} goals",
                goals.len()
            );
        }
    }
}

#[test]
fn a_principal_is_never_authorized_whatever_it_names() {
    let fleet = Fleet::new();
    let all = fleet.goals();
    // Even a principal that bears a member agent's name: it was not identified as that agent.
    for name in ["stranger", "cmo", "operator"] {
        for goals in [&all[..], &all[..1], &[][..]] {
            for asked in ASKED {
                assert_eq!(
                    resolve_goal(goals, &Audience::Principal(name.into()), asked),
                    Err(ScopeGap::AudienceNotAuthorized),
                    "principal {name} asked {asked:?} among {} goals",
                    goals.len()
                );
            }
        }
    }
}

#[test]
fn an_agent_naming_a_goal_it_is_in_gets_that_goal() {
    let fleet = Fleet::new();
    let goals = fleet.goals();
    assert_eq!(
        resolve_goal(&goals, &agent("cmo"), Some("launch")),
        Ok(goals[0])
    );
    // An agent in two goals gets whichever it names.
    assert_eq!(
        resolve_goal(&goals, &agent("cfo"), Some("launch")),
        Ok(goals[0])
    );
    assert_eq!(
        resolve_goal(&goals, &agent("cfo"), Some("audit")),
        Ok(goals[1])
    );
    assert_eq!(
        resolve_goal(&goals, &agent("ops"), Some("ops")),
        Ok(goals[2])
    );
}

#[test]
fn an_agent_naming_a_goal_it_is_not_in_learns_nothing() {
    let fleet = Fleet::new();
    let goals = fleet.goals();
    // A goal that exists and one that does not give the same answer, word for word.
    let exists = resolve_goal(&goals, &agent("cmo"), Some("audit"));
    let missing = resolve_goal(&goals, &agent("cmo"), Some("no_such_goal"));
    assert_eq!(exists, Err(ScopeGap::AudienceNotAuthorized));
    assert_eq!(missing, exists);
    assert_eq!(
        missing.unwrap_err().to_string(),
        exists.unwrap_err().to_string()
    );
    // The same for an agent in several goals, and for one in none.
    for (who, asked) in [
        ("cfo", "ops"),
        ("cfo", "no_such_goal"),
        ("intern", "launch"),
        ("intern", "no_such_goal"),
    ] {
        assert_eq!(
            resolve_goal(&goals, &agent(who), Some(asked)),
            Err(ScopeGap::AudienceNotAuthorized),
            "{who} asked {asked}"
        );
    }
    // Names are exact: a prefix or another case of a goal the agent is in is not that goal.
    for asked in ["launc", "Launch", "launch ", ""] {
        assert_eq!(
            resolve_goal(&goals, &agent("cmo"), Some(asked)),
            Err(ScopeGap::AudienceNotAuthorized),
            "cmo asked {asked:?}"
        );
    }
}

#[test]
fn an_agent_in_one_goal_naming_none_gets_it() {
    let fleet = Fleet::new();
    let goals = fleet.goals();
    assert_eq!(resolve_goal(&goals, &agent("cmo"), None), Ok(goals[0]));
    assert_eq!(resolve_goal(&goals, &agent("auditor"), None), Ok(goals[1]));
    assert_eq!(resolve_goal(&goals, &agent("ops"), None), Ok(goals[2]));
}

#[test]
fn an_agent_in_several_goals_naming_none_is_told_only_its_own_goals() {
    let fleet = Fleet::new();
    let goals = fleet.goals();
    let gap = resolve_goal(&goals, &agent("cfo"), None).unwrap_err();
    // Its two goals, in the fleet's order; never `ops`, which it is not in.
    assert_eq!(
        gap,
        ScopeGap::GoalNotNamed {
            goals: vec!["launch".into(), "audit".into()]
        }
    );
    assert_eq!(
        gap.to_string(),
        "goal_not_named: name one of your goals: launch, audit"
    );
    assert!(!gap.to_string().contains("ops"));
}

#[test]
fn an_agent_in_no_goal_is_not_authorized_whether_or_not_it_names_one() {
    let fleet = Fleet::new();
    let goals = fleet.goals();
    for asked in ASKED {
        assert_eq!(
            resolve_goal(&goals, &agent("intern"), asked),
            Err(ScopeGap::AudienceNotAuthorized),
            "asked {asked:?}"
        );
        // A fleet that declares no goal at all.
        assert_eq!(
            resolve_goal(&[], &agent("cmo"), asked),
            Err(ScopeGap::AudienceNotAuthorized),
            "asked {asked:?} of a fleet without goals"
        );
    }
}

#[test]
fn an_operator_naming_a_declared_goal_gets_it_without_being_a_member() {
    let fleet = Fleet::new();
    let goals = fleet.goals();
    for (i, name) in ["launch", "audit", "ops"].into_iter().enumerate() {
        assert_eq!(
            resolve_goal(&goals, &Audience::Operator, Some(name)),
            Ok(goals[i])
        );
    }
}

#[test]
fn an_operator_naming_an_undeclared_goal_gets_unknown_goal() {
    let fleet = Fleet::new();
    let goals = fleet.goals();
    let gap = resolve_goal(&goals, &Audience::Operator, Some("no_such_goal")).unwrap_err();
    assert_eq!(
        gap,
        ScopeGap::UnknownGoal {
            goal: "no_such_goal".into()
        }
    );
    assert_eq!(
        gap.to_string(),
        "unknown_goal: the fleet declares no goal `no_such_goal`"
    );
    assert_eq!(
        resolve_goal(&[], &Audience::Operator, Some("launch")),
        Err(ScopeGap::UnknownGoal {
            goal: "launch".into()
        })
    );
}

#[test]
fn an_unknown_goal_echoes_at_most_eighty_characters_of_the_name() {
    let fleet = Fleet::new();
    let goals = fleet.goals();
    let long = "é".repeat(200);
    let Err(ScopeGap::UnknownGoal { goal }) =
        resolve_goal(&goals, &Audience::Operator, Some(&long))
    else {
        panic!("an undeclared goal is unknown_goal");
    };
    assert_eq!(goal, "é".repeat(80));
}

#[test]
fn an_operator_naming_none_gets_the_only_goal() {
    let fleet = Fleet::new();
    let goals = fleet.goals();
    for one in &goals {
        assert_eq!(
            resolve_goal(std::slice::from_ref(one), &Audience::Operator, None),
            Ok(*one)
        );
    }
}

#[test]
fn an_operator_naming_none_among_several_goals_is_told_every_goal() {
    let fleet = Fleet::new();
    let goals = fleet.goals();
    assert_eq!(
        resolve_goal(&goals, &Audience::Operator, None),
        Err(ScopeGap::GoalNotNamed {
            goals: vec!["launch".into(), "audit".into(), "ops".into()]
        })
    );
}

#[test]
fn an_operator_naming_none_of_a_fleet_without_goals_has_nothing_to_choose() {
    assert_eq!(
        resolve_goal(&[], &Audience::Operator, None),
        Err(ScopeGap::GoalNotNamed { goals: Vec::new() })
    );
}

#[test]
fn every_gap_has_a_stable_code_its_text_starts_with() {
    let gaps = [
        (ScopeGap::AudienceNotAuthorized, "audience_not_authorized"),
        (ScopeGap::Unknown, "unknown"),
        (
            ScopeGap::GoalNotNamed {
                goals: vec!["launch".into(), "audit".into()],
            },
            "goal_not_named",
        ),
        (
            ScopeGap::GoalNotNamed { goals: Vec::new() },
            "goal_not_named",
        ),
        (
            ScopeGap::UnknownGoal {
                goal: "launch".into(),
            },
            "unknown_goal",
        ),
    ];
    for (gap, code) in gaps {
        assert_eq!(gap.code(), code);
        assert!(
            gap.to_string().starts_with(&format!("{code}: ")),
            "{gap:?} reads {gap}"
        );
        // The serialized form carries the same code.
        let json = serde_json::to_value(&gap).unwrap();
        assert_eq!(json["code"], code);
        assert_eq!(serde_json::from_value::<ScopeGap>(json).unwrap(), gap);
    }
}

#[test]
fn an_audience_serializes_as_its_kind_and_name() {
    for (audience, json) in [
        (
            agent("cmo"),
            serde_json::json!({"kind": "agent", "name": "cmo"}),
        ),
        (Audience::Operator, serde_json::json!({"kind": "operator"})),
        (
            Audience::Principal("p".into()),
            serde_json::json!({"kind": "principal", "name": "p"}),
        ),
        (
            Audience::Unidentified,
            serde_json::json!({"kind": "unidentified"}),
        ),
    ] {
        assert_eq!(serde_json::to_value(&audience).unwrap(), json);
        assert_eq!(serde_json::from_value::<Audience>(json).unwrap(), audience);
    }
}

/// Goals over a few names with a few members each (from a small alphabet, so that agents share
/// goals and goals share names with what callers ask for).
fn goal_table() -> impl Strategy<Value = Vec<(String, Vec<String>)>> {
    proptest::collection::vec(
        (
            (0..5u8).prop_map(|n| format!("g{n}")),
            proptest::collection::vec((0..5u8).prop_map(|n| format!("a{n}")), 0..4),
        ),
        0..5,
    )
}

fn as_goals(table: &[(String, Vec<String>)]) -> Vec<Goal<'_>> {
    table
        .iter()
        .map(|(name, agents)| Goal { name, agents })
        .collect()
}

proptest! {
    /// An agent's answer depends only on the goals it is in: taking every other goal away
    /// changes nothing, so no answer tells it whether a goal it is not in exists. What it gets
    /// is always a goal it is in.
    #[test]
    fn an_agents_answer_never_depends_on_goals_it_is_not_in(
        table in goal_table(),
        who in (0..6u8).prop_map(|n| format!("a{n}")),
        asked in proptest::option::of((0..6u8).prop_map(|n| format!("g{n}"))),
    ) {
        let goals = as_goals(&table);
        let mine: Vec<Goal<'_>> = goals.iter().copied().filter(|g| g.has(&who)).collect();
        let audience = Audience::Agent(who.clone());
        let answer = resolve_goal(&goals, &audience, asked.as_deref());
        prop_assert_eq!(&answer, &resolve_goal(&mine, &audience, asked.as_deref()));
        match answer {
            Ok(goal) => {
                prop_assert!(goal.has(&who));
                if let Some(asked) = &asked {
                    prop_assert_eq!(goal.name, asked.as_str());
                }
            }
            Err(ScopeGap::GoalNotNamed { goals: named }) => {
                prop_assert!(asked.is_none());
                prop_assert!(named.len() >= 2);
                let names: Vec<&str> = mine.iter().map(|g| g.name).collect();
                prop_assert_eq!(named, names);
            }
            Err(gap) => prop_assert_eq!(gap, ScopeGap::AudienceNotAuthorized),
        }
    }

    /// An operator that names a goal gets it exactly when the fleet declares it.
    #[test]
    fn an_operator_gets_exactly_the_declared_goal_it_names(
        table in goal_table(),
        asked in (0..6u8).prop_map(|n| format!("g{n}")),
    ) {
        let goals = as_goals(&table);
        match resolve_goal(&goals, &Audience::Operator, Some(&asked)) {
            Ok(goal) => {
                prop_assert_eq!(goal.name, asked.as_str());
                prop_assert_eq!(Some(goal), goals.iter().copied().find(|g| g.name == asked));
            }
            Err(gap) => {
                prop_assert!(goals.iter().all(|g| g.name != asked));
                prop_assert_eq!(gap, ScopeGap::UnknownGoal { goal: asked });
            }
        }
    }
}
