import pytest

from spec.cost import AcceptanceRate, CostModel, DraftAcceptance, StepCosts


def test_acceptance_rate_follows_recent_steps():
    rate = AcceptanceRate(prior=0.5)
    for _ in range(10):
        rate.observe(8, 8)  # all accepted: successes only
    assert rate.value > 0.95
    for _ in range(10):
        rate.observe(4, 0)  # one failure per step, nothing accepted
    assert rate.value < 0.1
    rate.observe(0, 0)  # no draft: no information
    assert rate.value < 0.1


def test_cpu_default_costs_grow_with_the_window():
    costs = StepCosts.cpu_default()
    assert len(costs.verify) == 17 and costs.verify[0] == 1.0
    assert all(a <= b for a, b in zip(costs.verify, costs.verify[1:], strict=False))
    assert costs.verify[16] == pytest.approx(7.8)


SEED = StepCosts(tuple(1.0 + 0.25 * k for k in range(17)))  # what a start-up calibration might say


def test_cost_model_uses_the_seed_until_it_observes():
    model = CostModel(SEED)
    assert model.rows(5) == SEED.rows(5) and model.share(4, 1) == SEED.share(4, 1)
    assert CostModel().rows(17) == StepCosts.cpu_default().rows(17)


def test_an_observed_row_count_is_priced_by_what_it_cost():
    model = CostModel(SEED)
    assert model.level is None  # nothing measured: the seed's prices, and the policy drafts nothing yet
    model.observe(2, 3.0)
    assert model.rows(2) == pytest.approx(3.0)
    model.observe(1, 2 * SEED.rows(1))  # the first one-row call sets the level, keeping rows(2)
    assert model.level == 2.0 and model.rows(2) == pytest.approx(3.0)
    model.observe(2, 2.0)  # an exponential average: moves part of the way
    assert 2.0 < model.rows(2) < 3.0
    before = model.rows(2)
    model.observe(2, 1000.0)  # one preempted call is clipped at 4x the average
    assert model.rows(2) < 4 * before


def test_unobserved_row_counts_take_the_shape_of_the_observed_ones_around_them():
    model = CostModel(SEED)
    model.observe(1, 2 * SEED.rows(1))  # the whole curve is twice the seed: every price doubles
    assert model.rows(9) == pytest.approx(2 * SEED.rows(9))
    model.observe(17, 4 * SEED.rows(17))  # many rows cost twice what the level says: shape(17) = 2
    assert model.shape(17) == pytest.approx(2.0)
    assert model.shape(9) == pytest.approx(1.5)  # interpolated between shape(1) = 1 and shape(17)
    assert model.shape(40) == pytest.approx(2.0)  # past the last observed: its shape


def test_one_row_steps_carry_a_new_level_to_every_price():
    """Another document (shorter, cheaper to attend over): its plain steps cost half, and so, without
    drafting once, do its 17-row calls, whose shape was learnt on the first document."""
    model = CostModel(SEED)
    for _ in range(30):
        model.observe(1, 1.0)
        model.observe(17, 12.0)
    assert model.rows(17) == pytest.approx(12.0, rel=0.05)
    for _ in range(30):
        model.observe(1, 0.5)
    assert model.rows(17) == pytest.approx(6.0, rel=0.05)


def test_draft_acceptance_is_learnt_per_position():
    rate = DraftAcceptance(0.5, weight=0.001)
    for _ in range(10):
        rate.observe(4, 1)  # the first token accepted, the second never
    assert rate.rates[0].value > 0.99 and rate.rates[1].value < 0.01
    assert rate.expected_upto(1)[-1] == pytest.approx(rate.rates[0].value)
    assert rate.expected_upto(16)[-1] < 1.01  # a long draft gains nothing past the first token
    copy = DraftAcceptance(0.5, weight=0.001)
    copy.observe(16, 16)  # a whole window accepted: every position succeeded
    assert copy.expected_upto(16)[-1] > 15
    later = DraftAcceptance(0.5)
    later.observe(1, 0)  # a failed first token says nothing about later positions
    assert later.rates[1].value == 0.5


def test_following_a_draft_token_by_token_equals_observing_it_whole():
    whole, by_token = DraftAcceptance(0.5, later=0.4), DraftAcceptance(0.5, later=0.4)
    for accepted in (16, 3, 0, 7):
        whole.observe(16, accepted)
        for i in range(min(accepted + 1, 16)):
            by_token.follow(i, i < accepted)
    assert [r.value for r in by_token.rates] == pytest.approx([r.value for r in whole.rates])
    censored = DraftAcceptance(0.5)
    for i in range(1, 6):  # a run still going: five later tokens right so far, no failure yet
        censored.follow(i, True)
    assert censored.rates[1].value > 0.8 and censored.rates[0].value == 0.5
