"""Reading Google Benchmark JSON for the table scripts: the run's context and, per case, one
result (the median where the run has repetitions)."""
import json


def case_results(path, name_pattern):
    """(context, [(match groups of name_pattern in the case's name, result dict)]) in run order."""
    data = json.load(open(path))
    results = []
    for run in data["benchmarks"]:
        if run.get("run_type") == "aggregate" and run.get("aggregate_name") != "median":
            continue
        results.append((name_pattern.search(run["name"]).groups(), run))
    return data["context"], results
