use super::*;

/// `cmo` on alpha, `cfo` on beta, `cdo` and `ceo` on gamma.
fn placements() -> BTreeMap<String, String> {
    [
        ("cmo", "alpha"),
        ("cfo", "beta"),
        ("cdo", "gamma"),
        ("ceo", "gamma"),
    ]
    .into_iter()
    .map(|(agent, host)| (agent.to_owned(), host.to_owned()))
    .collect()
}

/// Every host, and one the fleet does not know.
const HOSTS: [&str; 4] = ["alpha", "beta", "gamma", "stranger"];
/// Every agent, and one the fleet does not place.
const AGENTS: [&str; 5] = ["cmo", "cfo", "cdo", "ceo", "nobody"];

fn host_of<'a>(placements: &'a BTreeMap<String, String>, agent: &str) -> Option<&'a str> {
    placements.get(agent).map(String::as_str)
}

#[test]
fn a_reply_is_taken_from_the_callees_host_for_a_caller_served_here() {
    let p = placements();
    assert_eq!(arrived_reply(&p, "alpha", "beta", "cmo", "cfo"), Ok(()));
    // gamma speaks for beta's cfo.
    assert_eq!(
        arrived_reply(&p, "alpha", "gamma", "cmo", "cfo"),
        Err(Denial::NotServedBySender {
            agent: "cfo".into(),
            sender: "gamma".into(),
        })
    );
    assert_eq!(
        arrived_reply(&p, "alpha", "gamma", "cmo", "cfo")
            .unwrap_err()
            .to_string(),
        "cfo is not served by host gamma"
    );
    // A reply for a caller on another host.
    assert_eq!(
        arrived_reply(&p, "alpha", "beta", "cdo", "cfo"),
        Err(Denial::NotServedHere {
            agent: "cdo".into()
        })
    );
    assert_eq!(
        Denial::NotServedHere {
            agent: "cdo".into()
        }
        .to_string(),
        "cdo is not served here"
    );
    // The sender is checked first: a stranger learns nothing about where the caller lives.
    assert!(matches!(
        arrived_reply(&p, "alpha", "stranger", "nobody", "nobody"),
        Err(Denial::NotServedBySender { .. })
    ));
}

#[test]
fn arrived_reply_over_every_combination() {
    let p = placements();
    for here in HOSTS {
        for sender in HOSTS {
            for caller in AGENTS {
                for callee in AGENTS {
                    let answer = arrived_reply(&p, here, sender, caller, callee);
                    let from_callees_host = host_of(&p, callee) == Some(sender);
                    let caller_here = host_of(&p, caller) == Some(here);
                    let expected = if !from_callees_host {
                        Err(Denial::NotServedBySender {
                            agent: callee.into(),
                            sender: sender.into(),
                        })
                    } else if !caller_here {
                        Err(Denial::NotServedHere {
                            agent: caller.into(),
                        })
                    } else {
                        Ok(())
                    };
                    assert_eq!(answer, expected, "{here} {sender} {caller} {callee}");
                }
            }
        }
    }
}

#[test]
fn only_a_local_agent_is_asked_about() {
    let p = placements();
    assert_eq!(asked_agent(&p, "beta", "cfo"), Ok(()));
    for (here, agent) in [("beta", "cmo"), ("beta", "nobody"), ("stranger", "cfo")] {
        assert_eq!(
            asked_agent(&p, here, agent),
            Err(Denial::NotServedHere {
                agent: agent.into()
            })
        );
    }
}

/// A check of `child` of beta's `cfo`, asked by `sender`.
fn facts<'a>(
    p: &'a BTreeMap<String, String>,
    sender: &'a str,
    child: &'a RunId,
    query: RunQuery<'a>,
    stored: Option<StoredRun<'a>>,
) -> RunQueryFacts<'a> {
    RunQueryFacts {
        placements: p,
        here: "beta",
        sender,
        callee: "cfo",
        child_run: child,
        query,
        stored,
    }
}

#[test]
fn the_caller_host_may_check_and_resend_its_own_child_run() {
    let p = placements();
    let (parent, child) = (RunId::random(), RunId::random());
    let stored = Some(StoredRun {
        parent_agent: Some("cmo"),
        parent_run: Some(&parent),
    });
    let check = RunQuery::Check {
        caller: "cmo",
        parent_run: &parent,
    };
    assert_eq!(
        run_query(&facts(&p, "alpha", &child, check, stored)),
        Ok(())
    );
    assert_eq!(
        run_query(&facts(&p, "alpha", &child, RunQuery::Resend, stored)),
        Ok(())
    );

    // Another host asks about alpha's child: as if the run did not exist.
    let denied = run_query(&facts(&p, "gamma", &child, RunQuery::Resend, stored));
    assert_eq!(
        denied,
        Err(Denial::NoSuchChild {
            callee: "cfo".into(),
            child_run: child.clone(),
            sender: "gamma".into(),
        })
    );
    assert_eq!(
        denied.unwrap_err().to_string(),
        format!("cfo has no run {child} placed by an agent of host gamma")
    );

    // No such run, or a root run (placed by nobody's run).
    for stored in [
        None,
        Some(StoredRun {
            parent_agent: None,
            parent_run: None,
        }),
    ] {
        assert!(matches!(
            run_query(&facts(&p, "alpha", &child, check, stored)),
            Err(Denial::NoSuchChild { .. })
        ));
    }

    // alpha names another parent run of its own: the status is not its to read.
    let other = RunId::random();
    let wrong_parent = RunQuery::Check {
        caller: "cmo",
        parent_run: &other,
    };
    let denied = run_query(&facts(&p, "alpha", &child, wrong_parent, stored));
    assert_eq!(
        denied,
        Err(Denial::NotPlacedBy {
            child_run: child.clone(),
            caller: "cmo".into(),
            parent_run: other.clone(),
        })
    );
    assert_eq!(
        denied.unwrap_err().to_string(),
        format!("run {child} was not placed by cmo's run {other}")
    );
}

#[test]
fn a_caller_on_the_asking_host_may_not_check_a_sibling_agents_run() {
    // cdo and ceo both live on gamma; cdo placed the run, ceo asks for its status.
    let p = placements();
    let (parent, child) = (RunId::random(), RunId::random());
    let stored = Some(StoredRun {
        parent_agent: Some("cdo"),
        parent_run: Some(&parent),
    });
    let as_ceo = RunQuery::Check {
        caller: "ceo",
        parent_run: &parent,
    };
    assert!(matches!(
        run_query(&facts(&p, "gamma", &child, as_ceo, stored)),
        Err(Denial::NotPlacedBy { .. })
    ));
    // A resend names no caller: gamma serves the run's caller, the reply goes to cdo.
    assert_eq!(
        run_query(&facts(&p, "gamma", &child, RunQuery::Resend, stored)),
        Ok(())
    );
}

#[test]
fn run_query_over_every_combination() {
    let p = placements();
    let child = RunId::random();
    let parents = [RunId::random(), RunId::random()];
    let mut stored_runs = vec![None];
    for parent_agent in AGENTS.iter().copied().map(Some).chain([None]) {
        for parent_run in parents.iter().map(Some).chain([None]) {
            stored_runs.push(Some(StoredRun {
                parent_agent,
                parent_run,
            }));
        }
    }
    let mut queries = vec![RunQuery::Resend];
    for caller in AGENTS {
        for parent_run in &parents {
            queries.push(RunQuery::Check { caller, parent_run });
        }
    }
    let mut allowed = 0;
    for here in HOSTS {
        for sender in HOSTS {
            for callee in AGENTS {
                for &query in &queries {
                    for &stored in &stored_runs {
                        let f = RunQueryFacts {
                            placements: &p,
                            here,
                            sender,
                            callee,
                            child_run: &child,
                            query,
                            stored,
                        };
                        let answer = run_query(&f);
                        let local = host_of(&p, callee) == Some(here);
                        let placed_by_sender = stored.is_some_and(|run| {
                            run.parent_agent
                                .is_some_and(|agent| host_of(&p, agent) == Some(sender))
                        });
                        let names_the_placer = match query {
                            RunQuery::Resend => true,
                            RunQuery::Check { caller, parent_run } => stored.is_some_and(|run| {
                                run.parent_agent == Some(caller)
                                    && run.parent_run == Some(parent_run)
                            }),
                        };
                        let expected = if !local {
                            Err(Denial::NotServedHere {
                                agent: callee.into(),
                            })
                        } else if !placed_by_sender {
                            Err(Denial::NoSuchChild {
                                callee: callee.into(),
                                child_run: child.clone(),
                                sender: sender.into(),
                            })
                        } else if let (false, RunQuery::Check { caller, parent_run }) =
                            (names_the_placer, query)
                        {
                            Err(Denial::NotPlacedBy {
                                child_run: child.clone(),
                                caller: caller.into(),
                                parent_run: parent_run.clone(),
                            })
                        } else {
                            Ok(())
                        };
                        assert_eq!(answer, expected, "{f:?}");
                        if answer.is_ok() {
                            allowed += 1;
                            assert_eq!(asked_agent(&p, here, callee), Ok(()));
                        }
                    }
                }
            }
        }
    }
    assert!(allowed > 0);
}
