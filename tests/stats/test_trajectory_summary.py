"""The terminal summary of `stats trajectory` reads the typed record, and its JSON (parsed once) says the same."""
import numpy as np

from brownformer.config import DEFAULT_STATS
from brownformer.io import to_jsonable
from brownformer.stats.diffusion.trajectory_summary import summary_text
from brownformer.stats.diffusion.window_verdict import trajectory_result


def test_summary_of_the_record_and_of_its_json_agree_and_name_every_key_effect():
    X = np.cumsum(np.random.default_rng(0).standard_normal((24, 64, 4)), 0)
    meta = {"kind": "euclidean", "times": list(range(24)), "groups": [i % 8 for i in range(64)]}
    record = trajectory_result(X, meta, stats=DEFAULT_STATS)
    text = summary_text(record)
    assert text == summary_text(to_jsonable(record))
    assert text.startswith(record.verdict.upper()) and record.local_slopes.description in text
    for name in record.key_effects:
        assert f"  {name} " in text
    assert "uncalibrated" in text  # no table given: the note says so
