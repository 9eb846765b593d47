"""bench/serve.py's summary of timed rounds: medians, latency percentiles and the table's
multiples of the in-process path, on made-up rounds (the timed run itself needs Ray Serve and
the shipped model, and is not run here).

Does not cover: sending requests or deploying (bench/serve.py's `measure`, serve/).
"""

from bench import serve


def test_summary_and_table_of_made_up_rounds():
    samples = {  # (path, clients): one (wall seconds, latencies, tokens) per round
        (serve.IN_PROCESS, 2): [(1.0, [0.1, 0.3], 100), (2.0, [0.2, 0.4], 100)],
        ("serve 1x2", 2): [(1.0, [0.5, 0.5], 150), (1.0, [0.5, 0.7], 150)],
    }
    results = serve.summarise(samples)
    assert results[0] == {
        "path": serve.IN_PROCESS,
        "clients": 2,
        "tokens_per_second": 75.0,  # the median of 100 and 50 tokens/s
        "tokens_per_second_runs": [100.0, 50.0],
        "latency_p50_s": 0.25,
        "latency_p95_s": 0.385,
        "requests": 4,
    }
    assert results[1]["tokens_per_second"] == 150.0
    assert serve.results_table(results, [2]).splitlines()[2:] == [
        "| 2 | app (in-process) | 75.0 | 1.00 | 0.25 | 0.39 |",
        "| 2 | serve 1x2 | 150.0 | 2.00 | 0.50 | 0.67 |",
    ]
