"""What the tests and the benchmarks share (never imported by production code): a single-sequence
driver of the answer loop (harness.py), a real server process (live.py), the tiny random-weight
qwen35 MTP model (tiny_qwen35.py), fixed step costs for decisions that must not depend on timing
(costs.py), the offline replay of the draft policy (policy_sim.py), and recorded traffic
(traffic.py). Tests live in tests/, benchmarks in bench/; both import this, neither the other."""
