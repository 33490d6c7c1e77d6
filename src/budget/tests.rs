//! Unit tests of the budget model.

use super::*;

fn stage(tokens: Option<u64>, secs: Option<f64>, cost: Option<f64>) -> StageBudget {
    RunLedger::new(Budget::default()).stage_budget(
        &Budget {
            tokens,
            time_secs: secs,
            cost_usd: cost,
        },
        Arc::new(PerMillionTokens {
            prompt_usd: 1.0,
            completion_usd: 4.0,
        }),
    )
}

#[test]
fn tokens_stop_after_the_turn_that_passes_the_limit() {
    let mut t = Tracker::new(stage(Some(3500), None, None), 30);
    for _ in 0..3 {
        assert_eq!(t.before_turn(), None);
        t.record_turn(
            TokenCount {
                prompt: 900,
                completion: 100,
                ..TokenCount::default()
            },
            None,
        );
        assert_eq!(t.after_turn(), None);
    }
    assert_eq!(t.before_turn(), None);
    t.record_turn(
        TokenCount {
            prompt: 900,
            completion: 100,
            ..TokenCount::default()
        },
        None,
    );
    assert_eq!(
        t.after_turn().as_deref(),
        Some("token budget exceeded: 4000 of the stage's 3500 tokens")
    );
    let r = t.report();
    assert_eq!(r.exceeded.as_deref(), Some("tokens"));
    assert_eq!(r.used.turns, 4);
    assert_eq!(r.used.tokens, 4000);
    assert_eq!(r.limits.tokens, Some(3500));
    assert!(r.from_run.is_empty());
}

#[test]
fn a_budget_used_up_exactly_allows_no_further_turn() {
    let mut t = Tracker::new(stage(Some(2000), None, None), 30);
    t.record_turn(
        TokenCount {
            prompt: 1500,
            completion: 500,
            ..TokenCount::default()
        },
        None,
    );
    assert_eq!(t.after_turn(), None);
    assert_eq!(
        t.before_turn().as_deref(),
        Some("token budget used up: 2000 of the stage's 2000 tokens")
    );
}

#[test]
fn cost_is_priced_per_call_and_enforced() {
    // 1 $/M prompt, 4 $/M completion: 1000 + 4 * 250 = 2000 µ$ per call.
    let mut t = Tracker::new(stage(None, None, Some(0.005)), 30);
    assert!(t.notes().is_empty());
    for _ in 0..2 {
        t.record_turn(
            TokenCount {
                prompt: 1000,
                completion: 250,
                ..TokenCount::default()
            },
            None,
        );
        assert_eq!(t.after_turn(), None);
    }
    t.record_turn(
        TokenCount {
            prompt: 1000,
            completion: 250,
            ..TokenCount::default()
        },
        None,
    );
    assert_eq!(
        t.after_turn().as_deref(),
        Some("cost budget exceeded: $0.0060 of the stage's $0.0050")
    );
    let used = t.used();
    assert!((used.cost_usd.unwrap() - 0.006).abs() < 1e-12);
}

#[test]
fn an_unknown_price_cannot_enforce_a_cost_budget_and_says_so() {
    let mut b = stage(None, None, Some(0.01));
    b.pricing = Arc::new(UnknownPrice);
    let mut t = Tracker::new(b, 30);
    assert_eq!(
        t.notes(),
        [
            "cost budget of $0.0100 not enforced unless the server reports each call's cost: the model's price is unknown"
        ]
    );
    t.record_turn(
        TokenCount {
            prompt: 1_000_000,
            completion: 1_000_000,
            ..TokenCount::default()
        },
        None,
    );
    assert_eq!(t.after_turn(), None);
    assert_eq!(t.used().cost_usd, None);
    assert_eq!(t.report().notes.len(), 1);
}

#[test]
fn a_cost_the_server_reports_counts_and_enforces_without_a_price() {
    let b = StageBudget::own(
        &Budget {
            cost_usd: Some(0.01),
            ..Budget::default()
        },
        Arc::new(UnknownPrice),
    );
    assert_eq!(b.used_cost(), None, "nothing known before the first call");
    let mut t = Tracker::new(b.clone(), 30);
    t.record_turn(
        TokenCount {
            prompt: 10,
            completion: 1,
            ..TokenCount::default()
        },
        Some(0.004),
    );
    assert_eq!(t.after_turn(), None);
    t.record_turn(
        TokenCount {
            prompt: 10,
            completion: 1,
            ..TokenCount::default()
        },
        Some(0.007),
    );
    assert!((b.used_cost().unwrap() - 0.011).abs() < 1e-12);
    assert_eq!(
        t.after_turn().as_deref(),
        Some("cost budget exceeded: $0.0110 of $0.0100")
    );
    // One call whose cost nobody knows makes the total unknown.
    b.charge(TokenCount {
        prompt: 1,
        completion: 1,
        ..TokenCount::default()
    });
    assert_eq!(b.used_cost(), None);
}

#[test]
fn stage_gets_the_smaller_of_its_own_and_the_runs_remainder() {
    let mut run = RunLedger::new(Budget {
        tokens: Some(10_000),
        time_secs: None,
        cost_usd: Some(1.0),
    });
    let own = Budget {
        tokens: Some(4000),
        time_secs: Some(60.0),
        cost_usd: None,
    };
    let b = run.stage_budget(&own, Arc::new(UnknownPrice));
    assert_eq!(
        b.tokens,
        Some(Limit {
            max: 4000,
            source: Source::Stage
        })
    );
    assert_eq!(
        b.time.map(|l| (l.max, l.source)),
        Some((Duration::from_secs(60), Source::Stage))
    );
    assert_eq!(
        b.cost_usd,
        Some(Limit {
            max: 1.0,
            source: Source::Run {
                total: 1.0,
                earlier: 0.0,
                stages: 0
            }
        })
    );
    run.charge(&BudgetUse {
        turns: 3,
        tokens: 7000,
        time_secs: 1.0,
        cost_usd: Some(0.25),
    });
    let b = run.stage_budget(&own, Arc::new(UnknownPrice));
    assert_eq!(
        b.tokens,
        Some(Limit {
            max: 3000,
            source: Source::Run {
                total: 10_000,
                earlier: 7000,
                stages: 1
            }
        })
    );
    assert_eq!(b.cost_usd.map(|l| l.max), Some(0.75));
    let mut t = Tracker::new(b, 5);
    t.record_turn(
        TokenCount {
            prompt: 3000,
            completion: 1,
            ..TokenCount::default()
        },
        None,
    );
    assert_eq!(
        t.after_turn().as_deref(),
        Some(
            "token budget exceeded: 3001 of the 3000 tokens earlier stages left of the run's 10000"
        )
    );
    assert_eq!(t.report().from_run, ["tokens", "cost"]);
    // A spent run leaves nothing: no turn may start.
    run.charge(&BudgetUse {
        tokens: 5000,
        ..BudgetUse::default()
    });
    let mut t = Tracker::new(
        run.stage_budget(&Budget::default(), Arc::new(UnknownPrice)),
        5,
    );
    assert_eq!(
        t.before_turn().as_deref(),
        Some("the run's 10000-token budget was used up by earlier stages (12000 of 10000 tokens)")
    );
}

#[test]
fn unlimited_is_unlimited() {
    assert!(Budget::default().is_unlimited());
    let mut t = Tracker::new(StageBudget::default(), 3);
    t.record_turn(
        TokenCount {
            prompt: u32::MAX as u64,
            completion: 1,
            ..TokenCount::default()
        },
        None,
    );
    assert_eq!(t.after_turn(), None);
    assert_eq!(t.before_turn(), None);
    assert_eq!(t.time_left(), None);
}

#[test]
fn a_child_is_carved_out_of_what_is_left_including_the_stages_own_turns() {
    let stage = stage(Some(1000), Some(600.0), None);
    let mut t = Tracker::new(stage.clone(), 30);
    t.record_turn(
        TokenCount {
            prompt: 850,
            completion: 50,
            ..TokenCount::default()
        },
        None,
    );
    let cap = Budget {
        tokens: Some(200_000),
        time_secs: Some(60.0),
        cost_usd: None,
    };
    let child = stage.carve(&cap);
    assert_eq!(child.tokens, Some(100), "the stage's own 900 tokens count");
    assert_eq!(child.time_secs, Some(60.0), "the cap is the smaller");
    // A finished child charges the same account.
    stage.charge(TokenCount {
        prompt: 60,
        completion: 40,
        ..TokenCount::default()
    });
    assert_eq!(stage.carve(&cap).tokens, Some(0));
    assert_eq!(t.used().tokens, 1000);
    assert_eq!(
        t.before_turn().as_deref(),
        Some("token budget used up: 1000 of the stage's 1000 tokens")
    );
    // Without a limit of its own, the cap is the child's budget.
    assert_eq!(StageBudget::default().carve(&cap), cap);
}

#[test]
fn an_externally_enforced_budget_only_refuses_to_start_a_turn() {
    let mut b = StageBudget::own(
        &Budget {
            tokens: Some(100),
            time_secs: Some(3600.0),
            cost_usd: None,
        },
        Arc::new(UnknownPrice),
    );
    b.enforcement = Enforcement::TurnStart;
    let mut t = Tracker::new(b, 30);
    assert_eq!(t.time_left(), None, "calls are not time-bounded");
    t.record_turn(
        TokenCount {
            prompt: 140,
            completion: 10,
            ..TokenCount::default()
        },
        None,
    );
    assert_eq!(t.after_turn(), None, "the parent kills mid-turn");
    assert_eq!(
        t.before_turn().as_deref(),
        Some("token budget used up: 150 of 100 tokens")
    );
    assert_eq!(t.exceeded(), Some(Dimension::Tokens));
}

#[test]
fn reasons_say_whose_budget_and_never_nothing_of_nothing() {
    // The run's budget alone limits the first stage: it is the run's.
    let run = RunLedger::new(Budget {
        tokens: Some(3500),
        time_secs: None,
        cost_usd: None,
    });
    let mut t = Tracker::new(
        run.stage_budget(&Budget::default(), Arc::new(UnknownPrice)),
        5,
    );
    t.record_turn(
        TokenCount {
            prompt: 3900,
            completion: 100,
            ..TokenCount::default()
        },
        None,
    );
    assert_eq!(
        t.after_turn().as_deref(),
        Some("token budget exceeded: 4000 of the run's 3500 tokens")
    );
    // Earlier stages spent the whole run's time and cost.
    let mut run = RunLedger::new(Budget {
        tokens: None,
        time_secs: Some(3.0),
        cost_usd: Some(0.01),
    });
    run.charge(&BudgetUse::default());
    run.started -= Duration::from_millis(3200);
    let pricing = Arc::new(PerMillionTokens {
        prompt_usd: 1.0,
        completion_usd: 4.0,
    });
    let mut t = Tracker::new(run.stage_budget(&Budget::default(), pricing.clone()), 5);
    let why = t.before_turn().unwrap();
    assert_eq!(
        why,
        "the run's 3 s time budget was used by earlier stages (3.2 s of 3 s)"
    );
    assert!(!why.contains("0.0 s of 0.0 s"), "{why}");
    run.limits.time_secs = None;
    run.charge(&BudgetUse {
        cost_usd: Some(0.01),
        ..BudgetUse::default()
    });
    let mut t = Tracker::new(run.stage_budget(&Budget::default(), pricing), 5);
    assert_eq!(
        t.before_turn().as_deref(),
        Some("the run's $0.0100 cost budget was used up by earlier stages ($0.0100 of $0.0100)")
    );
    // A subagent's own cap is neither the stage's nor the run's.
    let mut t = Tracker::new(
        StageBudget::own(
            &Budget {
                tokens: Some(10),
                ..Budget::default()
            },
            Arc::new(UnknownPrice),
        ),
        5,
    );
    t.record_turn(
        TokenCount {
            prompt: 10,
            completion: 1,
            ..TokenCount::default()
        },
        None,
    );
    assert_eq!(
        t.after_turn().as_deref(),
        Some("token budget exceeded: 11 of 10 tokens")
    );
}

#[test]
fn a_budget_reads_as_its_limits_or_unlimited() {
    assert_eq!(Budget::default().to_string(), "unlimited");
    let b = Budget {
        tokens: Some(200_000),
        time_secs: Some(600.0),
        cost_usd: Some(2.5),
    };
    assert_eq!(b.to_string(), "200000 tokens, 600 s, $2.50");
}
