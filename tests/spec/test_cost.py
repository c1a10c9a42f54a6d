import pytest

from spec.cost import AcceptanceRate, StepCosts, expected_accepted


def test_expected_accepted_is_a_geometric_sum():
    assert expected_accepted(0.5, 3) == pytest.approx(0.5 + 0.25 + 0.125)
    assert expected_accepted(1.0, 16) == 16
    assert expected_accepted(0.0, 8) == 0
    assert expected_accepted(0.9, 0) == 0


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
